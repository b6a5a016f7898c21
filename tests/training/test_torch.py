"""PyTorch adapters: identical batches for any worker count, collator, DP rows."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from phisieve import ConfigError
from phisieve.term_index import index
from phisieve.training.loaders import MaskedBatches, PoissonSteps, PrivacyMaskingCollator


def collect(loader) -> list[dict]:
    return [{k: v.clone() for k, v in b.items()} for b in loader]


def test_same_batches_with_0_1_2_workers(encoded_bert, physionet_docs):
    # The Rust thread pool is started in this process before the workers fork.
    index(physionet_docs, k=2)
    runs = []
    for workers in (0, 1, 2):
        loader = MaskedBatches(
            encoded_bert,
            "ppmlm",
            batch_size=16,
            seed=3,
            epoch=1,
            num_workers=workers,
            return_seq_ids=True,
            shuffle_window=2,
        )
        runs.append(collect(loader))
    assert len(runs[0]) == len(MaskedBatches(encoded_bert, batch_size=16))
    for other in runs[1:]:
        assert len(other) == len(runs[0])
        for a, b in zip(runs[0], other, strict=True):
            for k in a:
                assert torch.equal(a[k], b[k]), k
    seqs = torch.cat([b["seq_id"] for b in runs[0]])
    assert sorted(seqs.tolist()) == list(
        range(pq.read_metadata(next(encoded_bert.glob("part-*.parquet"))).num_rows)
    )
    assert seqs.tolist() != sorted(seqs.tolist())  # shuffled
    b = runs[0][0]
    assert b["input_ids"].shape == (16, 128) and b["input_ids"].dtype == torch.int64


def test_ranks_split_batches_and_epochs_differ(encoded_bert):
    whole = collect(MaskedBatches(encoded_bert, "mlm", batch_size=32, seed=0, return_seq_ids=True))
    ranks = [
        collect(
            MaskedBatches(
                encoded_bert,
                "mlm",
                batch_size=32,
                seed=0,
                rank=r,
                world_size=2,
                return_seq_ids=True,
            )
        )
        for r in (0, 1)
    ]
    assert len(ranks[0]) == len(ranks[1]) == len(whole) // 2
    for i, b in enumerate(ranks[1]):
        assert torch.equal(b["seq_id"], whole[2 * i + 1]["seq_id"])
    loader = MaskedBatches(encoded_bert, "mlm", batch_size=32, seed=0, return_seq_ids=True)
    loader.set_epoch(1)
    assert not torch.equal(next(iter(loader))["seq_id"], whole[0]["seq_id"])


def test_ppclm_batches_and_protection(encoded_gpt):
    for b in MaskedBatches(encoded_gpt, "ppclm", batch_size=64, pad_to=8):
        ids, labels, att = b["input_ids"], b["labels"], b["attention_mask"]
        assert ids.shape[1] % 8 == 0
        assert (labels[att == 0] == -100).all()
        kept = labels != -100
        assert torch.equal(labels[kept], ids[kept])
    with pytest.raises(ConfigError, match="mask token"):
        MaskedBatches(encoded_gpt, "ppmlm")
    with pytest.raises(ConfigError, match="pseudonymize"):
        MaskedBatches(encoded_gpt, "clma")


def test_real_batches_never_target_protected_words_and_mask_the_exact_budget(encoded_bert):
    table = pq.read_table(encoded_bert)
    rows = {
        s: (p, w)
        for s, p, w in zip(
            table["seq_id"].to_pylist(),
            table["protected"].to_pylist(),
            table["word_ids"].to_pylist(),
            strict=True,
        )
    }
    total = 0
    for seed in (0, 1):
        for b in MaskedBatches(
            encoded_bert, "ppmlm", batch_size=64, seed=seed, return_seq_ids=True
        ):
            for row, s in enumerate(b["seq_id"].tolist()):
                flags, words = rows[s]
                targets = (b["labels"][row, : len(flags)] != -100).tolist()
                assert not any(t and p for t, p in zip(targets, flags, strict=True))
                blocked = {w for w, p in zip(words, flags, strict=True) if p}
                eligible = {w for w in words if w >= 0} - blocked
                chosen = {w for w, t in zip(words, targets, strict=True) if t}
                assert len(chosen) == int(0.15 * len(eligible) + 0.5)
                whole = [t for w, t in zip(words, targets, strict=True) if w in chosen]
                assert all(whole)
                total += sum(targets)
    assert total > 1000


def test_real_causal_batches_never_target_protected_tokens(encoded_gpt):
    table = pq.read_table(encoded_gpt)
    prot = dict(zip(table["seq_id"].to_pylist(), table["protected"].to_pylist(), strict=True))
    assert sum(map(sum, prot.values())) > 100
    for b in MaskedBatches(encoded_gpt, "ppclm", batch_size=64, return_seq_ids=True):
        for row, s in enumerate(b["seq_id"].tolist()):
            flags = torch.tensor(prot[s])
            labels = b["labels"][row, : len(flags)]
            assert (labels[flags] == -100).all()
            assert torch.equal(labels[~flags], b["input_ids"][row, : len(flags)][~flags])


def test_collator_matches_the_loader(encoded_bert):
    rows = pq.read_table(encoded_bert).slice(0, 8).to_pylist()
    coll = PrivacyMaskingCollator(encoded_bert, "ppmlm", seed=5, return_seq_ids=True)
    a = coll(rows)
    loader = MaskedBatches(
        encoded_bert, "ppmlm", batch_size=8, seed=5, shuffle=False, return_seq_ids=True
    )
    b = next(iter(loader))
    for k in a:
        assert torch.equal(a[k], b[k])


def test_dp_steps_cap_sequences_per_patient(encoded_bert):
    steps = PoissonSteps(encoded_bert, "ppmlm", sample_rate=0.5, key=7, max_per_patient=3)
    rows, units = steps.rows(0)
    patients = steps.table.column("patient_id").take(rows).to_pylist()
    counts: dict[str, int] = {}
    for p in patients:
        counts[p] = counts.get(p, 0) + 1
    assert max(counts.values()) == 3 and len(counts) == units[-1] + 1
    batch = steps.batch(0)
    assert batch["input_ids"].shape == (len(rows), 128) and batch["n_units"] == len(counts)
