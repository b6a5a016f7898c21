"""Training helpers that need no corpus-specific code: tokenizers learnt offline
(:mod:`phisieve.training.tokenizers`). The training loop itself is :mod:`phisieve.train`."""
