"""Training on encoded datasets (DESIGN.md §4-§6).

* :mod:`phisieve.training.stage` — the ``tokenizer``, ``init-model`` and ``train`` stages:
  their options, declared without importing what they run;
* :mod:`phisieve.training.masking` — the PPMLM/PPCLM objectives and their batches;
* :mod:`phisieve.training.loaders` — PyTorch datasets, loaders and a collator;
* :mod:`phisieve.training.loop` — ``phisieve train``: the training loop;
* :mod:`phisieve.training.dp` — DP-SGD with the patient as the privacy unit;
* :mod:`phisieve.training.learn_tokenizer` — WordPiece and byte-level BPE tokenizers learnt
  offline;
* :mod:`phisieve.training.model_init` — a small model with seeded random weights.
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PoissonSteps": ".loaders",
        "MaskedBatches": ".loaders",
        "PrivacyMaskingCollator": ".loaders",
        "MaskingConfig": ".masking",
        "DPConfig": ".dp",
        "TokenizerStage": ".stage",
        "InitModelStage": ".stage",
        "TrainStage": ".stage",
        "TrainConfig": ".loop",
    },
)
