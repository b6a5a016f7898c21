"""The patient x term index: which terms fewer than k patients use (indirect identifiers).

:mod:`phisieve.term_index.build` streams documents into the Rust counter under a memory
budget; the ``index`` and ``merge`` stages write the ``terms`` dataset.
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **{
            name: ".build"
            for name in (
                "IndexReport",
                "index",
                "mark_direct",
                "marker",
                "merge_terms",
                "parse_size",
                "protected_share",
                "read_terms",
                "term_stats",
                "terms_options",
                "with_terms_options",
            )
        },
        "IndexStage": ".stage",
        "MergeStage": ".stage",
    },
)
