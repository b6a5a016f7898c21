"""Stages that bring a corpus in and cut it: ``ingest`` (notes from outside into the
``documents`` dataset, :mod:`phisieve.corpus.ingest`) and ``split`` (by patient,
:mod:`phisieve.corpus.split`)."""
