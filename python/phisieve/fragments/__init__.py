"""Fragment shuffling (after Ignashina & Ive): notes cut into short noun and verb phrases,
filtered with phisieve's identifiers, and mixed into training examples whose pieces come
from different documents and patients.

* :mod:`phisieve.fragments.chunkers` — NPs and VPs from spaCy (offline) or Stanza;
* :mod:`phisieve.fragments.pieces` — fragments cut from notes, with their words;
* :mod:`phisieve.fragments.select` — which fragments may be shared;
* :mod:`phisieve.fragments.mix` — the examples;
* :mod:`phisieve.fragments.stage` — ``phisieve fragment``.
"""
