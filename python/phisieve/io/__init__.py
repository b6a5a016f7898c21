"""Reading and writing: the dataset contract every stage writes through, and the readers.

* :mod:`phisieve.io.dataset` — outputs (datasets, folders, files) written atomically with a
  completion marker in ``OUT.meta/``, checked when read, recovered after a kill;
* :mod:`phisieve.io.sources` — anything that holds rows (a dataset, a Parquet file, an Arrow
  table or stream, a polars frame) as re-iterable record batches;
* :mod:`phisieve.io.schema` — the Arrow schemas stages exchange;
* :mod:`phisieve.io.readers` — notes from MIMIC-III CSV, PhysioNet deid, JSONL, Parquet and
  text folders, bad rows rejected with a reason (never their text);
* :mod:`phisieve.io.annotated` — a PhysioNet deid folder's notes and gold spans.
"""
