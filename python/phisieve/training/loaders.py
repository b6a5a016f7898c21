"""PyTorch adapters over the ``encoded`` dataset.

* :class:`MaskedBatches`: a DataLoader-compatible iterable of ready training batches
  (``input_ids``, ``attention_mask``, ``labels``) for any objective of
  :mod:`phisieve.training.masking`. Batch ``b`` of an epoch is a pure function of
  ``(seed, epoch, b)`` and the dataset: the same batches, in the same order, with 0, 1 or
  more workers and on any distributed rank layout (rank ``r`` of ``R`` gets batches
  ``r, r + R, ...``).
* :class:`PrivacyMaskingCollator`: a ``transformers``-style data collator (for ``Trainer``)
  taking lists of ``encoded`` rows.
* :class:`PoissonSteps`: the steps of DP-SGD, patients (or sequences) drawn by Poisson
  sampling (:mod:`phisieve.training.dp`).

The mask sampler is single-threaded Rust (no rayon pool), so DataLoader workers may fork.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import _core
from ..dependencies import require
from ..encode import ENCODED, read_encoding
from ..errors import ConfigError, InputError
from ..io.dataset import dataset_files
from .masking import (
    ENCODED_COLUMNS,
    PROTECT_FLAG,
    MaskingConfig,
    Objective,
    batch_length,
    check_masking,
    check_protection,
    make_batch,
    make_batch_from_lists,
    objective,
    padded_length,
)

torch = require("torch")
_data = require("torch.utils.data")
DataLoader, IterableDataset, get_worker_info = (
    _data.DataLoader,
    _data.IterableDataset,
    _data.get_worker_info,
)

COLUMNS = ["patient_id", *ENCODED_COLUMNS]
"""The columns of ``encoded`` that batches are built from (and capped by patient)."""

_M1, _M2, _GOLDEN = (
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
    np.uint64(0x9E3779B97F4A7C15),
)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function, vectorised (uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def shuffle_keys(seed: int, epoch: int, salt: int, items: np.ndarray) -> np.ndarray:
    """A random key per item, a pure function of (seed, epoch, salt, item): sorting by it
    gives a permutation independent of numpy's generators and of any worker layout."""
    with np.errstate(over="ignore"):
        s = _mix(np.uint64(seed) + _GOLDEN)
        s = _mix(s ^ (np.uint64(epoch) + _GOLDEN))
        s = _mix(s ^ (np.uint64(salt) + _GOLDEN))
        return _mix(s ^ (items.astype(np.uint64) + _GOLDEN))


class _Parts:
    """The row groups of an encoded dataset, and a small cache of decoded ones."""

    def __init__(self, path: Path, cache: int) -> None:
        self.files = dataset_files(path)
        groups = []
        for f, name in enumerate(self.files):
            meta = pq.ParquetFile(name).metadata
            groups += [(f, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
        self.groups = groups
        self.sizes = np.array([n for *_, n in groups], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self._cache: OrderedDict[int, pa.Table] = OrderedDict()
        self._cache_size = max(1, cache)
        self._readers: dict[int, pq.ParquetFile] = {}

    @property
    def num_rows(self) -> int:
        return int(self.starts[-1])

    def group(self, g: int) -> pa.Table:
        if g in self._cache:
            self._cache.move_to_end(g)
            return self._cache[g]
        f, rg, _ = self.groups[g]
        if f not in self._readers:
            self._readers[f] = pq.ParquetFile(self.files[f])
        table = self._readers[f].read_row_group(rg, columns=COLUMNS)
        self._cache[g] = table
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return table

    def take(self, rows: np.ndarray) -> pa.RecordBatch:
        """The rows (global numbers) in the given order."""
        g = np.searchsorted(self.starts, rows, side="right") - 1
        order = np.argsort(g, kind="stable")
        pieces = []
        for group in np.unique(g):
            sel = rows[g == group] - self.starts[group]
            pieces.append(self.group(int(group)).take(pa.array(sel)))
        table = pa.concat_tables(pieces).combine_chunks()
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        return table.take(pa.array(back)).combine_chunks().to_batches()[0]


def epoch_order(
    parts_sizes: np.ndarray, seed: int, epoch: int, shuffle: bool, window: int
) -> np.ndarray:
    """Global row numbers in the order of an epoch: row groups in a random order, rows
    shuffled within windows of ``window`` consecutive row groups (so a reader holds at most
    ``window`` decoded row groups)."""
    starts = np.concatenate([[0], np.cumsum(parts_sizes)]).astype(np.int64)
    if not shuffle:
        return np.arange(starts[-1], dtype=np.int64)
    groups = np.argsort(shuffle_keys(seed, epoch, 1, np.arange(len(parts_sizes))), kind="stable")
    out = []
    for w in range(0, len(groups), window):
        rows = np.concatenate(
            [np.arange(starts[g], starts[g + 1], dtype=np.int64) for g in groups[w : w + window]]
        )
        out.append(rows[np.argsort(shuffle_keys(seed, epoch, 2, rows), kind="stable")])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


class _BatchStream(IterableDataset):
    """Yields the batches of one epoch that belong to this rank and DataLoader worker."""

    def __init__(self, owner: MaskedBatches) -> None:
        self.owner = owner

    def __iter__(self) -> Iterator[dict[str, Any]]:
        o = self.owner
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        parts = _Parts(o.path, cache=o.shuffle_window + 1)
        for b in o.batch_numbers()[worker::workers]:
            rows = o.order[b * o.batch_size : (b + 1) * o.batch_size]
            yield o.build(parts.take(rows))


class MaskedBatches:
    """Training batches of an ``encoded`` dataset for one objective: an iterable of dicts of
    tensors (``input_ids``, ``attention_mask``, ``labels``; ``seq_id`` when asked).

    Parameters
    ----------
    path
        The ``encoded`` dataset folder (``phisieve encode``).
    objective
        ``ppmlm``, ``ppclm``, ``mlm``, ``clm``, ``mlma``, ``clma``, ``dpp``, ``ipp``
        (``dpp-clm``/``ipp-clm`` for causal models, or pass ``causal=True``).
    batch_size, seed, epoch
        Batches of an epoch are a pure function of these and the dataset.
    num_workers, pin_memory, prefetch_factor
        Passed to the underlying ``torch.utils.data.DataLoader``.
    shuffle, shuffle_window
        Shuffle row groups, and rows within windows of ``shuffle_window`` row groups.
    drop_last
        Drop the last, smaller batch.
    pad_to
        ``"max_len"`` pads every batch to the dataset's ``max_len``; an int pads to the longest
        row rounded up to a multiple of it.
    masking
        Masked-LM probability and replacement split, and whether protected words are hidden
        from the input (:class:`phisieve.training.masking.MaskingConfig`).
    rank, world_size
        Distributed training: this process gets batches ``rank, rank + world_size, ...``
        (defaults from ``torch.distributed`` when initialised). Every rank gets the same
        number of batches; the last ``< world_size`` batches are dropped.
    return_seq_ids
        Add each row's ``seq_id``, to trace a batch back to the dataset.
    allow_unprotected
        Train a privacy-preserving objective on a dataset encoded without ``--terms`` and
        ``--spans`` (nothing protected). Refused by default.
    """

    def __init__(
        self,
        path: str | Path,
        objective: str = "ppmlm",
        *,
        batch_size: int = 32,
        seed: int = 0,
        epoch: int = 0,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        shuffle: bool = True,
        shuffle_window: int = 8,
        drop_last: bool = False,
        pad_to: str | int = "max_len",
        masking: MaskingConfig | None = None,
        causal: bool | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        return_seq_ids: bool = False,
        multiprocessing_context: Any = None,
        allow_unprotected: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be positive, not {batch_size}")
        self.path = Path(path)
        self.collator = PrivacyMaskingCollator(
            self.path,
            objective,
            seed=seed,
            epoch=epoch,
            masking=masking,
            causal=causal,
            pad_to=pad_to,
            return_seq_ids=return_seq_ids,
            allow_unprotected=allow_unprotected,
        )
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle, self.shuffle_window = shuffle, max(1, shuffle_window)
        self.drop_last = drop_last
        if rank is None or world_size is None:
            dist = torch.distributed
            ready = dist.is_available() and dist.is_initialized()
            rank = rank if rank is not None else (dist.get_rank() if ready else 0)
            world_size = world_size or (dist.get_world_size() if ready else 1)
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not in 0..{world_size - 1}")
        self.rank, self.world_size = rank, world_size
        self._sizes = _Parts(self.path, cache=1).sizes
        self.order = epoch_order(self._sizes, seed, epoch, shuffle, self.shuffle_window)
        self.loader_options = {
            "num_workers": num_workers,
            "pin_memory": pin_memory,
            "multiprocessing_context": multiprocessing_context if num_workers else None,
        }
        if num_workers and prefetch_factor is not None:
            self.loader_options["prefetch_factor"] = prefetch_factor

    @property
    def epoch(self) -> int:
        """The epoch whose order and masks the batches follow."""
        return self.collator.epoch

    @property
    def objective(self) -> Objective:
        return self.collator.objective

    @property
    def encoding(self) -> dict[str, Any]:
        return self.collator.encoding

    def set_epoch(self, epoch: int) -> None:
        """Start another epoch: new order and new masks."""
        self.collator.set_epoch(epoch)
        self.order = epoch_order(self._sizes, self.seed, epoch, self.shuffle, self.shuffle_window)

    def _batches(self) -> int:
        n = len(self.order)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_numbers(self) -> list[int]:
        """The epoch's batch numbers that this rank trains on, in order."""
        per_rank = self._batches() // self.world_size
        return list(range(self.rank, per_rank * self.world_size, self.world_size))

    def __len__(self) -> int:
        return self._batches() // self.world_size

    def build(self, rows: pa.RecordBatch) -> dict[str, Any]:
        """The training batch of these encoded rows (tensors)."""
        return self.collator(rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        loader = DataLoader(_BatchStream(self), batch_size=None, **self.loader_options)
        return iter(loader)


def _objective(
    name: str, causal: bool | None, encoding: dict[str, Any], allow_unprotected: bool = False
) -> Any:
    o = objective(name, causal)
    check_protection(o, encoding, allow_unprotected)
    if o.needs_pseudonymized and not encoding.get("pseudonymized"):
        raise ConfigError(
            f"objective {o.name} needs a dataset encoded with --pseudonymize "
            "(direct identifiers replaced by X)"
        )
    if not o.causal and encoding.get("mask_token_id") is None:
        raise ConfigError(f"objective {o.name} needs a tokenizer with a mask token")
    return o


class PrivacyMaskingCollator:
    """A ``transformers`` data collator: a list of ``encoded`` rows (dicts with ``seq_id``,
    ``input_ids``, ``word_ids``, ``protected``, ``direct``, ``indirect``) -> a batch of tensors.

    Call :meth:`set_epoch` at each epoch (new masks); draws depend on (seed, epoch, seq_id)
    only, never on the batch a row lands in. With ``transformers.Trainer`` over a
    ``datasets.Dataset`` of encoded rows, pass ``remove_unused_columns=False`` in the training
    arguments so that ``word_ids`` and the flags reach the collator (``phisieve[torch]``
    installs ``accelerate``, which the Trainer needs). A privacy-preserving objective on a
    dataset that protects nothing is refused unless ``allow_unprotected``.

    Rows of Python lists (what ``datasets`` returns) are read once, in Rust, straight into the
    mask sampler (:func:`~phisieve.training.masking.make_batch_from_lists`); rows of numpy
    arrays or tensors, and Arrow record batches, go through
    :func:`~phisieve.training.masking.make_batch`. Every form gives the same batch.
    """

    def __init__(
        self,
        encoding: dict[str, Any] | str | Path,
        objective: str = "ppmlm",
        *,
        seed: int = 0,
        epoch: int = 0,
        masking: MaskingConfig | None = None,
        causal: bool | None = None,
        pad_to: str | int = "max_len",
        return_seq_ids: bool = False,
        allow_unprotected: bool = False,
    ) -> None:
        self.encoding = encoding if isinstance(encoding, dict) else read_encoding(Path(encoding))
        self.objective = _objective(objective, causal, self.encoding, allow_unprotected)
        self.seed, self.epoch = seed, epoch
        self.masking = masking or MaskingConfig()
        check_masking(self.objective, self.masking)
        self.pad_to = pad_to
        self.return_seq_ids = return_seq_ids

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, rows: Sequence[dict[str, Any]] | pa.RecordBatch) -> dict[str, Any]:
        if not isinstance(rows, pa.RecordBatch):
            flag = PROTECT_FLAG.get(self.objective.protect)
            if not self.masking.hide_protected_input and _python_lists(rows, flag):
                return self._from_lists(rows, flag)
            rows = _rows_to_batch(rows, flag)
        out = make_batch(
            rows,
            self.objective,
            length=batch_length(rows, self.encoding["max_len"], self.pad_to),
            return_seq_ids=self.return_seq_ids,
            **self._draws(),
        )
        return {k: torch.from_numpy(v) for k, v in out.items()}

    def _draws(self) -> dict[str, Any]:
        """What both batch builders take besides the rows, the objective and the length."""
        enc = self.encoding
        return {
            "pad_id": enc["pad_token_id"],
            "mask_id": enc["mask_token_id"],
            "vocab_size": enc["vocab_size"],
            "seed": self.seed,
            "epoch": self.epoch,
            "masking": self.masking,
        }

    def _from_lists(self, rows: Sequence[dict[str, Any]], flag: str | None) -> dict[str, Any]:
        names = ["input_ids", "word_ids", *([flag] if flag else [])]
        cols = {name: _values(rows, name) for name in names}
        seq_ids = _values(rows, "seq_id")
        longest = max(map(len, cols["input_ids"]))
        try:
            out = make_batch_from_lists(
                seq_ids,
                cols["input_ids"],
                cols["word_ids"],
                cols[flag] if flag else None,
                self.objective,
                length=padded_length(longest, self.encoding["max_len"], self.pad_to),
                **self._draws(),
            )
        except (TypeError, OverflowError):
            raise InputError(
                "collator rows: values that do not convert (seq_id uint64, input_ids uint32, "
                "word_ids int32 and flags bool lists)"
            ) from None
        batch = {k: torch.from_numpy(v) for k, v in out.items()}
        if self.return_seq_ids:
            # As the Arrow path gives them: uint64 ids viewed as int64 (torch has no uint64).
            batch["seq_id"] = torch.from_numpy(np.asarray(seq_ids, np.uint64).astype(np.int64))
        return batch


def _python_lists(rows: Sequence[dict[str, Any]], flag: str | None) -> bool:
    """Whether ``rows`` look like ``datasets``' Python rows (lists), with the columns needed."""
    if not rows:
        return False
    first = rows[0]
    names = ("seq_id", "input_ids", "word_ids", *([flag] if flag else []))
    return all(n in first for n in names) and type(first["input_ids"]) is list


def _values(rows: Sequence[dict[str, Any]], name: str) -> list[Any]:
    try:
        return [r[name] for r in rows]
    except KeyError:
        row = next(i for i, r in enumerate(rows) if name not in r)
        raise InputError("a collator row lacks a column", row=row, column=name) from None


_ROW_TYPES = {name: ENCODED.field(name).type for name in ENCODED_COLUMNS}
_FLAGS = ("protected", "direct", "indirect")


def _rows_to_batch(rows: Sequence[dict[str, Any]], flag: str | None = None) -> pa.RecordBatch:
    """Dict rows (Python lists, numpy arrays or tensors, as ``datasets`` returns them) -> one
    Arrow batch, column by column: Python lists go through ``_core.py_lists`` (one pass in
    Rust, no object per token), arrays are concatenated. Of the three flag columns only
    ``flag`` (the one the objective reads; none for ``mlm``/``clm``) is converted; the others
    come back all false, as the mask sampler never reads them."""
    if not rows:
        raise ConfigError("an empty batch")
    wanted = [n for n in _ROW_TYPES if n not in _FLAGS or n == flag]
    missing = [name for name in wanted if name not in rows[0]]
    if missing:
        raise ConfigError(
            f"the collator's rows lack {', '.join(missing)}: with transformers.Trainer, pass "
            "remove_unused_columns=False in the training arguments"
        )
    cols: dict[str, pa.Array] = {}
    for name in wanted:
        t = _ROW_TYPES[name]
        values = _values(rows, name)
        try:
            cols[name] = _column(values, t)
        except (TypeError, ValueError, OverflowError, RuntimeError):
            what = f"{t.value_type} lists" if pa.types.is_list(t) else str(t)
            raise InputError(f"collator rows: values that are not {what}", column=name) from None
    ids = cols["input_ids"]
    for name in _FLAGS:
        if name not in cols:
            false = pa.array(np.zeros(len(ids.values), np.bool_))
            cols[name] = pa.ListArray.from_arrays(ids.offsets, false, type=_ROW_TYPES[name])
    return pa.record_batch({name: cols[name] for name in _ROW_TYPES})


_KINDS = {pa.uint32(): "uint32", pa.int32(): "int32", pa.bool_(): "bool"}


def _column(values: list[Any], t: pa.DataType) -> pa.Array:
    if not pa.types.is_list(t):
        return pa.array(np.fromiter(values, t.to_pandas_dtype(), len(values)), t)
    if isinstance(values[0], (np.ndarray, torch.Tensor)):
        parts = [v.numpy(force=True) if isinstance(v, torch.Tensor) else v for v in values]
        lengths = np.fromiter(map(len, parts), np.int64, len(parts))
        offsets = np.zeros(len(values) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate(parts).astype(t.value_type.to_pandas_dtype(), copy=False)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, t.value_type), type=t)
    lists = values if all(type(v) is list for v in values) else [list(v) for v in values]
    return _core.py_lists(lists, _KINDS[t.value_type]).cast(t)


def _id_keys(values: list[Any]) -> np.ndarray:
    """A stable 64-bit number per id (BLAKE2b of its text): what keyed draws take."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(str(v).encode(), digest_size=8).digest(), "little")
            for v in values
        ],
        dtype=np.uint64,
    )


def _uniform(keys: np.ndarray) -> np.ndarray:
    """Keys (uint64) as uniform draws in [0, 1) (53 bits)."""
    return (keys >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class PoissonSteps(IterableDataset):
    """The batches of DP-SGD with Poisson sampling over privacy units (patients, or
    sequences), held in memory: step ``s`` takes unit ``u`` when a keyed draw of ``(s, u)``
    is below ``sample_rate``, and, of a patient, at most ``max_per_patient`` sequences (the
    smallest keyed draws of ``(s, seq_id)``). Each item is one step's batch: the objective's
    tensors with the rows grouped by unit, ``units`` (each row's unit within the step, 0, 1,
    ...), ``step`` and ``n_units``; masks are drawn with the step as their epoch.

    Every draw is a pure function of ``key`` (from the run's secret), the step and the ids,
    so the batches are the same with any number of DataLoader workers (worker ``w`` of ``W``
    builds steps ``w, w + W, ...``; the loader returns them in order).

    Parameters
    ----------
    path
        The ``encoded`` dataset.
    objective
        The training objective (masks and labels; see :class:`MaskedBatches`).
    unit
        ``"patient"``: a unit is a patient (all of their sequences, at most
        ``max_per_patient`` a step). ``"sequence"``: a unit is a sequence, of a training set
        holding at most ``max_per_patient`` sequences of each patient (chosen once, by
        keyed draws of ``seed``).
    sample_rate
        ``q``, each unit's probability of being in a step.
    key
        The key of the draws (:func:`phisieve.training.dp.sampling_key`).
    seed
        Seeds the masks (with the step as their epoch) and the sequence unit's cap.
    steps
        How many steps iterating yields (0, 1, ... ``steps - 1``).
    max_per_patient, masking, causal, pad_to, allow_unprotected
        As for :class:`MaskedBatches`; ``max_per_patient`` as ``unit`` says.
    """

    def __init__(
        self,
        path: str | Path,
        objective: str,
        *,
        unit: str = "patient",
        sample_rate: float = 0.01,
        key: int = 0,
        seed: int = 0,
        steps: int = 1,
        max_per_patient: int | None = None,
        masking: MaskingConfig | None = None,
        causal: bool | None = None,
        pad_to: str | int = "max_len",
        allow_unprotected: bool = False,
    ) -> None:
        if unit not in ("patient", "sequence"):
            raise ConfigError(f"the unit is patient or sequence, not {unit!r}")
        if not 0 < sample_rate <= 1:
            raise ConfigError(f"the sampling rate must be in (0, 1], not {sample_rate}")
        self.encoding = read_encoding(Path(path))
        self.collator = PrivacyMaskingCollator(
            self.encoding,
            objective,
            seed=seed,
            masking=masking,
            causal=causal,
            pad_to=pad_to,
            allow_unprotected=allow_unprotected,
        )
        files = dataset_files(Path(path))
        table = (
            pa.concat_tables([pq.read_table(f, columns=COLUMNS) for f in files])
            if files
            else pa.table({c: pa.array([], ENCODED.field(c).type) for c in COLUMNS})
        ).combine_chunks()
        self.unit, self.sample_rate, self.key = unit, float(sample_rate), int(key)
        self.seed, self.steps = seed, int(steps)
        self.max_per_patient = max_per_patient
        patients = table.column("patient_id").to_pylist()
        seq = table.column("seq_id").to_numpy().astype(np.uint64)
        names = sorted(set(patients))
        self.patients = len(names)
        if unit == "sequence" and max_per_patient is not None:
            keep = np.sort(_capped(patients, seq, seed, max_per_patient))
            table, seq = table.take(pa.array(keep)), seq[keep]
            patients = [patients[i] for i in keep.tolist()]
        self.table = table.combine_chunks()
        self.seq = seq
        if unit == "patient":
            index = {p: i for i, p in enumerate(names)}
            of = np.array([index[p] for p in patients], dtype=np.int64)
            order = np.lexsort((seq, of))
            bounds = np.searchsorted(of[order], np.arange(len(names) + 1))
            self.rows_of = [order[bounds[i] : bounds[i + 1]] for i in range(len(names))]
            self.unit_keys = _id_keys(names)
        else:
            self.rows_of = None
            self.unit_keys = seq
        self.units = len(self.unit_keys)
        """N: the number of units the sampling rate applies to."""

    @property
    def sequences(self) -> int:
        """Sequences that can be sampled."""
        return self.table.num_rows

    def sampled(self, step: int) -> np.ndarray:
        """The units (indices, ascending) in step ``step``."""
        draws = _uniform(shuffle_keys(self.key, step, 11, self.unit_keys))
        return np.flatnonzero(draws < self.sample_rate)

    def rows(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of step ``step``, grouped by unit, and each row's unit within the step."""
        chosen = self.sampled(step)
        if self.rows_of is None:
            return chosen.astype(np.int64), np.arange(len(chosen), dtype=np.int64)
        rows, units = [], []
        for j, u in enumerate(chosen.tolist()):
            mine = self.rows_of[u]
            if self.max_per_patient is not None and len(mine) > self.max_per_patient:
                draws = shuffle_keys(self.key, step, 12, self.seq[mine])
                mine = np.sort(mine[np.argsort(draws, kind="stable")[: self.max_per_patient]])
            rows.append(mine)
            units.append(np.full(len(mine), j, dtype=np.int64))
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(rows), np.concatenate(units)

    def batch(self, step: int) -> dict[str, Any]:
        """Step ``step``'s batch (tensors; no rows when no unit was drawn)."""
        rows, units = self.rows(step)
        out: dict[str, Any] = {"step": step, "n_units": int(units[-1]) + 1 if len(units) else 0}
        out["units"] = torch.from_numpy(units)
        if not len(rows):
            return out
        self.collator.set_epoch(step)
        batch = self.table.take(pa.array(rows)).combine_chunks().to_batches()[0]
        out.update(self.collator(batch))
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for step in range(worker, self.steps, workers):
            yield self.batch(step)


def _capped(patients: list[Any], seq: np.ndarray, seed: int, cap: int) -> np.ndarray:
    """Rows keeping at most ``cap`` sequences of each patient (the smallest keyed draws of
    ``(seed, seq_id)``)."""
    import polars as pl

    frame = pl.DataFrame(
        {
            "row": np.arange(len(patients)),
            "patient": pl.Series(patients, dtype=pl.String),
            "key": shuffle_keys(seed, 0, 3, seq),
        }
    )
    return (
        frame.sort("key", "row")
        .group_by("patient", maintain_order=True)
        .head(cap)["row"]
        .to_numpy()
    )
