"""The recognizers ``detect`` combines: Rust rules, lists and the built-in dictionaries
(:mod:`~phisieve.detect.recognizers.dictionaries`), Presidio
(:mod:`~phisieve.detect.recognizers.presidio`), Stanza
(:mod:`~phisieve.detect.recognizers.stanza`), a CRF over words
(:mod:`~phisieve.detect.recognizers.crf`) and a trained token classifier
(:mod:`~phisieve.detect.recognizers.model`)."""

import polars as pl

SPAN_ROWS = {
    "row": pl.Int64,
    "start": pl.Int32,
    "end": pl.Int32,
    "label": pl.String,
    "source": pl.String,
    "score": pl.Float32,
}
"""Spans found in a batch, one row each: the note's row in the batch and the span."""
