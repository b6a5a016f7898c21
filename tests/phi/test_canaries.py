"""The canaries stage: planted secrets, where they go, how often, what they leave untouched,
and the secret spaces the audit ranks them in."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import shutil
import struct
from collections import Counter
from collections.abc import Callable
from datetime import date, datetime
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from phisieve import api
from phisieve.api import synth
from phisieve.errors import ConfigError, InputError, PhisieveError
from phisieve.io.dataset import dataset_files, meta_dir, read_manifest, side_file
from phisieve.io.schema import SPANS
from phisieve.io.sources import open_source
from phisieve.phi.canaries import (
    CANARIES_FILE,
    KINDS,
    WORDS,
    candidate_indices,
    candidates,
    read_canaries,
    secret_at,
    secrets_at,
    space_size,
)
from phisieve.phi.stage import CanariesStage
from phisieve.pipeline.engine import LocalEngine
from phisieve.pipeline.runner import run_stage
from phisieve.pipeline.stage import Context
from phisieve.pipeline.stats import Stats

# Secrets as `python -c "import secrets; print(secrets.token_hex(32))"` writes them.
SECRET = b"39681a57149459b6124cc3210de7c47180499cac79413be75eb3144c388a4d11"
OTHER_SECRET = b"a7c4839fa86ae7343466baddabffcd6feafefea66c23531b259dd0fd05072963"


def read(path: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in dataset_files(path)])


def sentence(row: dict) -> str:
    return row["prefix"] + row["secret"] + row["suffix"]


def hmac_draw(key: bytes, *parts: str) -> int:
    """phisieve's keyed draw: HMAC-SHA256 of length-framed parts, first 8 bytes big-endian."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for p in ("phisieve-canaries-v1", *parts):
        b = p.encode()
        mac.update(struct.pack("<Q", len(b)) + b)
    return int.from_bytes(mac.digest()[:8], "big")


def host_order(key: bytes, canary_id: str, doc_ids: list[str]) -> list[str]:
    """The order a canary's repeats go round-robin over its patient's notes: by the keyed draw
    of (canary_id, doc_id), ties by doc_id; never the order the rows come in."""
    return sorted(doc_ids, key=lambda d: (hmac_draw(key, "host", canary_id, d), d))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 synthetic patients with 2-8 notes each."""
    out = tmp_path_factory.mktemp("canaries") / "docs"
    synth(out, patients=40, seed=0)
    return out


@pytest.fixture(scope="module")
def planted(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory, key_file: Callable[[bytes], Path]
) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("canaries") / "out"
    return out, api.canaries(corpus, out, secret_file=key_file(SECRET), n=30)


# The first three hosts of each canary of test_uneven_split... under SECRET (patients p5, p0,
# p3, p6, p8, p7, p2; p6, p0 and p3 have one note, p7 and p5 two, p8 and p2 three).
EXPECTED_HOSTS = [
    ["p5-1"], ["p0-0"], ["p3-0"], ["p6-0"] * 3, ["p8-2", "p8-1", "p8-0"],
    ["p7-0", "p7-1", "p7-0"], ["p2-2", "p2-0", "p2-1"],
]  # fmt: skip


def small_docs(notes: dict[str, int]) -> pa.Table:
    """Patient -> number of notes; with gold spans and an extra column."""
    rows: dict[str, list] = {"doc_id": [], "patient_id": [], "text": [], "spans": [], "ward": []}
    for p, k in notes.items():
        for j in range(k):
            text = f"Pt {p} seen by Dr Hale on day {j}.\nPlan: rest"
            rows["doc_id"].append(f"{p}-{j}")
            rows["patient_id"].append(p)
            rows["text"].append(text)
            rows["spans"].append([{"start": 17, "end": 21, "label": "NAME", "source": "gold",
                                   "score": 1.0}])  # fmt: skip
            rows["ward"].append(f"w{j}")
    return pa.table(
        {
            "doc_id": pa.array(rows["doc_id"], pa.string()),
            "patient_id": pa.array(rows["patient_id"], pa.string()),
            "text": pa.array(rows["text"], pa.large_string()),
            "spans": pa.array(rows["spans"], SPANS),
            "ward": pa.array(rows["ward"], pa.string()),
        }
    )


# --------------------------------------------------------------------------------------------
# Secret spaces


def test_space_sizes_and_the_ends_of_each_space():
    assert space_size("name") == 10**6
    assert space_size("date") == 73049 == (date(2100, 1, 1) - date(1900, 1, 1)).days
    assert space_size("mrn") == 10**7
    assert secret_at("name", 0) == "Aaron Abbott"
    assert secret_at("name", 1) == "Aaron Acevedo"
    assert secret_at("name", 1000) == "Abigail Abbott"
    assert secret_at("name", 10**6 - 1) == "Zachary Zimmerman"
    assert secret_at("date", 0) == "01/01/1900"
    assert secret_at("date", 59) == "03/01/1900"  # 1900 is no leap year
    assert secret_at("date", 73048) == "12/31/2099"
    assert secret_at("mrn", 0) == "0000000"
    assert secret_at("mrn", 42) == "0000042"
    assert secret_at("mrn", 10**7 - 1) == "9999999"
    for kind in KINDS:
        for bad in (-1, space_size(kind)):
            with pytest.raises(ConfigError, match="index"):
                secret_at(kind, bad)
    with pytest.raises(ConfigError, match="unknown canary kind"):
        secret_at("ssn", 0)
    with pytest.raises(ConfigError):
        secret_at("mrn", 1.0)  # type: ignore[arg-type]


@cache
def _name_lists() -> tuple[dict[str, int], dict[str, int]]:
    first = sorted({s.split()[0] for s in secrets_at("name", range(0, 10**6, 1000))})
    last = sorted({s.split()[1] for s in secrets_at("name", range(1000))})
    return {f: i for i, f in enumerate(first)}, {s: j for j, s in enumerate(last)}


def _index_of(kind: str, secret: str) -> int:
    """The inverse of secret_at, written independently."""
    if kind == "name":
        first, last = _name_lists()
        f, s = secret.split(" ")
        return first[f] * 1000 + last[s]
    if kind == "date":
        return (datetime.strptime(secret, "%m/%d/%Y").date() - date(1900, 1, 1)).days
    if kind == "words":
        index = 0
        for word in secret.split(" "):
            index = index * len(WORDS) + WORDS.index(word)
        return index
    assert re.fullmatch(r"[0-9]{7}", secret)
    return int(secret)


@pytest.mark.parametrize("kind", list(KINDS))
def test_secret_at_is_a_bijection_on_a_sample(kind):
    space = space_size(kind)
    rng = np.random.default_rng(7)
    sample = sorted({0, 1, space - 2, space - 1, *rng.integers(0, space, 500).tolist()})
    got = secrets_at(kind, sample)
    assert got == [secret_at(kind, i) for i in sample]
    assert len(set(got)) == len(sample)
    assert [_index_of(kind, s) for s in got] == sample


def test_the_name_lists_are_1000_title_cased_census_names_each():
    first = [secret_at("name", i * 1000).split()[0] for i in range(1000)]
    last = [secret_at("name", j).split()[1] for j in range(1000)]
    for names in (first, last):
        assert len(set(names)) == 1000
        assert names == sorted(names)
        assert all(n.isalpha() and n == n.capitalize() for n in names)
    # The most frequent census names are in, rare ones are not.
    assert {"James", "Mary", "John", "Patricia"} <= set(first)
    assert {"Smith", "Johnson", "Williams", "Garcia"} <= set(last)
    assert "Zyla" not in first


@pytest.mark.parametrize("kind, n", [("mrn", 5000), ("date", 3000), ("date", 40000),
                                     ("name", 2000)])  # fmt: skip
def test_candidates_are_distinct_in_the_space_and_deterministic(kind, n):
    got = candidates(kind, n, b"audit-key")
    assert len(got) == n == len(set(got))
    assert got == candidates(kind, n, b"audit-key")
    assert got != candidates(kind, n, b"other-key")
    idx = [_index_of(kind, s) for s in got]
    assert all(0 <= i < space_size(kind) for i in idx)
    assert idx == candidate_indices(kind, n, b"audit-key").tolist()


def test_candidates_cover_the_space_evenly():
    # The rejection path: 20000 of 10**7 record numbers, ~2000 per tenth of the space.
    idx = candidate_indices("mrn", 20000, b"k")
    counts = np.bincount(idx * 10 // 10**7, minlength=10)
    assert counts.min() > 1750 and counts.max() < 2250
    # The shuffle path (more than a quarter of the space): all but two days.
    idx = candidate_indices("date", 73047, b"k")
    assert len(np.unique(idx)) == 73047 and idx.min() >= 0 and idx.max() < 73049
    counts = np.bincount(candidate_indices("date", 30000, b"k") * 10 // 73049, minlength=10)
    assert counts.min() > 2750 and counts.max() < 3250


def test_candidates_may_hold_the_true_secret_and_the_whole_space_is_exact():
    # The draw excludes nothing: with the whole space asked for, every value comes back (the
    # canary's own secret too, which the audit removes before ranking).
    whole = secrets_at("date", range(73049))
    assert candidates("date", 73048, b"k") == whole
    assert candidates("date", 10**6, b"k") == whole
    assert candidates("mrn", 0, b"k") == []
    with pytest.raises(ConfigError):
        candidates("mrn", -1, b"k")


# --------------------------------------------------------------------------------------------
# The stage


def test_canaries_per_repeat_count_and_kind(planted):
    out, manifest = planted
    table = read_canaries(out)
    rows = table.to_pylist()
    assert [r["canary_id"] for r in rows] == [f"canary-{i:03d}" for i in range(30)]
    assert Counter(r["repeats"] for r in rows) == {1: 10, 4: 10, 16: 10}
    for r in (1, 4, 16):
        kinds = [row["kind"] for row in rows if row["repeats"] == r]
        assert kinds == ["name", "date", "mrn"] * 3 + ["name"]
    assert len({r["patient_id"] for r in rows}) == 30
    assert {r["space"] for r in rows if r["kind"] == "date"} == {73049}
    for r in rows:
        k = KINDS[r["kind"]]
        assert (r["prefix"], r["suffix"], r["space"]) == (k.prefix, k.suffix, k.space)
        assert len(r["doc_ids"]) == r["repeats"]
    assert manifest["stage"] == "canaries"
    assert manifest["canaries"] == 30 and manifest["patients"] == 30
    assert manifest["insertions"] == 210 and manifest["corpus_patients"] == 40
    assert manifest["by_repeats"] == {"1": 10, "4": 10, "16": 10}
    assert manifest["by_kind"] == {"name": 12, "date": 9, "mrn": 9}
    assert manifest["options"] == {
        "n": 30,
        "repeats": [1, 4, 16],
        "kinds": ["name", "date", "mrn"],
        "new_patients": False,
        "coin": False,
    }
    assert all(r["included"] and not r["new_patient"] for r in rows)
    assert read_manifest(out)["rows"] == read(out).num_rows


def test_patients_and_secrets_are_keyed_hmac_draws(corpus, planted):
    out, _ = planted
    rows = read_canaries(out).to_pylist()
    patients = sorted(set(read(corpus).column("patient_id").to_pylist()))
    ranked = sorted(patients, key=lambda p: (hmac_draw(SECRET, "patient", p), p))
    assert [r["patient_id"] for r in rows] == ranked[:30]
    # Secrets: the first draw, unless an earlier canary of the kind has that secret.
    seen: dict[str, set[str]] = {k: set() for k in KINDS}
    for r in rows:
        attempt = 0
        while True:
            draw = hmac_draw(SECRET, "secret", r["kind"], r["canary_id"], str(attempt))
            want = secret_at(r["kind"], draw % space_size(r["kind"]))
            if want not in seen[r["kind"]]:
                break
            attempt += 1
        assert r["secret"] == want
        seen[r["kind"]].add(want)


def test_each_sentence_occurs_repeats_times_in_its_patients_notes_only(corpus, planted):
    out, _ = planted
    before, after = read(corpus), read(out)
    notes: dict[str, list[str]] = {}
    for d, p in zip(before["doc_id"].to_pylist(), before["patient_id"].to_pylist(), strict=True):
        notes.setdefault(p, []).append(d)
    texts = dict(zip(after["doc_id"].to_pylist(), after["text"].to_pylist(), strict=True))
    owner = dict(zip(after["doc_id"].to_pylist(), after["patient_id"].to_pylist(), strict=True))
    for c in read_canaries(out).to_pylist():
        s = sentence(c)
        assert all(s not in t for t in before["text"].to_pylist())
        counts = Counter({d: t.count(s) for d, t in texts.items() if s in t})
        assert sum(counts.values()) == c["repeats"]
        assert {owner[d] for d in counts} == {c["patient_id"]}
        assert counts == Counter(c["doc_ids"])
        # Round-robin over the patient's notes in keyed doc_id order: every note gets
        # repeats // notes insertions, or one more.
        mine = host_order(SECRET, c["canary_id"], notes[c["patient_id"]])
        assert c["doc_ids"] == [mine[k % len(mine)] for k in range(c["repeats"])]
        per_note = Counter(c["doc_ids"])
        fewest = c["repeats"] // len(mine)
        assert all(fewest <= per_note[d] <= fewest + 1 for d in mine)


def test_notes_keep_their_text_as_a_prefix_and_other_rows_are_identical(corpus, planted):
    out, _ = planted
    before, after = read(corpus), read(out)
    assert after.schema == before.schema
    assert after.num_rows == before.num_rows
    assert after.drop(["text"]).equals(before.drop(["text"]))
    added: dict[str, list[str]] = {}
    for c in read_canaries(out).to_pylist():
        for d in c["doc_ids"]:
            added.setdefault(d, []).append("\n" + sentence(c))
    changed = 0
    for d, old, new in zip(
        before["doc_id"].to_pylist(),
        before["text"].to_pylist(),
        after["text"].to_pylist(),
        strict=True,
    ):
        assert new == old + "".join(added.get(d, []))
        changed += new != old
    assert changed == len(added) == read_manifest(out)["notes_modified"]


def test_a_rerun_writes_the_same_bytes(corpus, planted, tmp_path, key_file):
    out, _ = planted
    again = tmp_path / "again"
    api.canaries(corpus, again, secret_file=key_file(SECRET), n=30)
    assert [Path(f).read_bytes() for f in dataset_files(again)] == [
        Path(f).read_bytes() for f in dataset_files(out)
    ]
    assert (
        side_file(again, CANARIES_FILE).read_bytes() == side_file(out, CANARIES_FILE).read_bytes()
    )


def test_a_different_secret_plants_different_canaries(corpus, planted, tmp_path, key_file):
    out, _ = planted
    api.canaries(corpus, tmp_path / "other", secret_file=key_file(OTHER_SECRET), n=30)
    mine = read_canaries(out).to_pylist()
    other = read_canaries(tmp_path / "other").to_pylist()
    assert [r["secret"] for r in mine] != [r["secret"] for r in other]
    assert [r["patient_id"] for r in mine] != [r["patient_id"] for r in other]
    assert len({r["secret"] for r in mine} & {r["secret"] for r in other}) < 3


def by_doc(table: pa.Table) -> dict[str, dict]:
    return {r["doc_id"]: r for r in table.to_pylist()}


def shuffled(table: pa.Table, seed: int, grouped: bool) -> pa.Table:
    """The rows in a random order: each patient's notes still together (in a random order
    within the patient and among patients), or scattered."""
    rng = np.random.default_rng(seed)
    if not grouped:
        return table.take(rng.permutation(table.num_rows))
    rows: dict[str, list[int]] = {}
    for i, p in enumerate(table.column("patient_id").to_pylist()):
        rows.setdefault(p, []).append(i)
    order = []
    for p in rng.permutation(sorted(rows)).tolist():
        order.extend(rng.permutation(rows[p]).tolist())
    return table.take(order)


def random_batches(table: pa.Table, seed: int) -> list[pa.RecordBatch]:
    """The rows shuffled and cut into batches of random sizes (1 row to a quarter)."""
    rng = np.random.default_rng(seed)
    rows = table.take(rng.permutation(table.num_rows)).combine_chunks()
    cuts, at = [], 0
    while at < rows.num_rows:
        k = int(rng.integers(1, max(2, rows.num_rows // 4)))
        cuts.append(rows.slice(at, k).to_batches()[0])
        at += k
    return cuts


@pytest.mark.parametrize("grouped", [True, False])
def test_canaries_do_not_depend_on_row_order(tmp_path, grouped, key_file):
    table = small_docs({f"p{i}": 1 + i % 3 for i in range(9)})
    api.canaries(table, tmp_path / "a", secret_file=key_file(SECRET), n=7)
    for seed in range(3):
        b = tmp_path / f"b{seed}"
        api.canaries(shuffled(table, seed, grouped), b, secret_file=key_file(SECRET), n=7)
        # The same canaries in the same notes: equal side files, equal rows by doc_id.
        assert read_canaries(b).equals(read_canaries(tmp_path / "a"))
        assert by_doc(read(b)) == by_doc(read(tmp_path / "a"))


@pytest.mark.parametrize("batch_rows", [1, 2, 5, 4096])
def test_canaries_do_not_depend_on_batch_size(corpus, planted, tmp_path, batch_rows):
    out, _ = planted
    stage = CanariesStage(n=30, secret=SECRET)
    stage.batch_rows = batch_rows  # the rows per batch of the reduce's scans and the map
    run_stage(stage, {"docs": corpus}, tmp_path / "out")
    assert read_canaries(tmp_path / "out").equals(read_canaries(out))
    assert read(tmp_path / "out").equals(read(out))


def test_the_batch_function_takes_any_subset_of_rows(corpus, planted):
    # One reduce over the corpus, then the batch function over the rows shuffled and cut
    # anywhere (a patient's notes split over batches, in any order): every row comes out as
    # the whole run wrote it.
    out, _ = planted
    docs = read(corpus)
    stage = CanariesStage(n=30, secret=SECRET)
    ctx = Context(stage, {"docs": open_source(docs, 7)}, {}, Path("unused"), engine=LocalEngine())
    state = stage.reduce(ctx)
    want = by_doc(read(out))
    for seed in range(3):
        got: dict[str, dict] = {}
        for batch in random_batches(docs, seed):
            got.update(by_doc(pa.Table.from_batches([stage.map(batch, state, Stats())])))
        assert got == want


def test_canary_notes_must_have_distinct_doc_ids(tmp_path, key_file):
    table = small_docs({"a": 2, "b": 2})
    twice = table.set_column(0, "doc_id", pa.array(["a-0", "a-0", "b-0", "b-1"]))
    with pytest.raises(InputError, match="doc_id 'a-0' names several notes"):
        api.canaries(twice, tmp_path / "x", secret_file=key_file(SECRET), n=2)
    # One doc_id in two patients is no ambiguity: notes are addressed by (patient, doc_id).
    shared = table.set_column(0, "doc_id", pa.array(["n0", "n1", "n0", "n1"]))
    api.canaries(shared, tmp_path / "ok", secret_file=key_file(SECRET), n=2, repeats="4")
    after = read(tmp_path / "ok")
    for c in read_canaries(tmp_path / "ok").to_pylist():
        mine = [t for t in after.to_pylist() if t["patient_id"] == c["patient_id"]]
        assert sum(t["text"].count(sentence(c)) for t in mine) == 4
        assert sum(t["text"].count(sentence(c)) for t in after.to_pylist()) == 4
    assert not (tmp_path / "x").exists()


def test_uneven_split_round_robin_and_spans_stay_valid(tmp_path, key_file):
    # 7 canaries over (1, 4, 16): 3, 2, 2. Patients have 1-3 notes.
    table = small_docs({f"p{i}": 1 + i % 3 for i in range(9)})
    manifest = api.canaries(
        table, tmp_path / "out", secret_file=key_file(SECRET), n=7, kinds="mrn,date"
    )
    rows = read_canaries(tmp_path / "out").to_pylist()
    assert [(r["repeats"], r["kind"]) for r in rows] == [
        (1, "mrn"), (1, "date"), (1, "mrn"), (4, "mrn"), (4, "date"), (16, "mrn"), (16, "date"),
    ]  # fmt: skip
    assert manifest["insertions"] == 3 + 8 + 32 and manifest["by_repeats"] == {
        "1": 3, "4": 2, "16": 2,
    }  # fmt: skip
    after = read(tmp_path / "out")
    assert after.column("ward").equals(table.column("ward"))
    assert after.column("spans").equals(table.column("spans"))
    for t in after.to_pylist():
        (span,) = t["spans"]
        assert t["text"][span["start"] : span["end"]] == "Hale"
        assert t["text"].startswith(f"Pt {t['patient_id']} seen by Dr Hale on day ")
    # The hosts go round-robin over each patient's notes in the keyed order of their doc_ids
    # (host_order), not in the order the rows come in (which the stage once used).
    for r in rows:
        k = int(r["patient_id"][1:]) % 3 + 1
        mine = host_order(SECRET, r["canary_id"], [f"{r['patient_id']}-{i}" for i in range(k)])
        assert r["doc_ids"] == [mine[i % k] for i in range(r["repeats"])]
    # The exact hosts of this key: the patients with 2 or 3 notes do not start at note 0.
    assert [r["doc_ids"][:3] for r in rows] == EXPECTED_HOSTS


def test_nothing_secret_in_the_manifest(planted):
    out, manifest = planted
    text = (meta_dir(out) / "manifest.json").read_text()
    assert json.loads(text)["canaries"] == manifest["canaries"]
    assert SECRET.decode() not in text and OTHER_SECRET.decode() not in text
    for c in read_canaries(out).to_pylist():
        assert c["secret"] not in text
        assert sentence(c) not in text
    assert sorted(p.name for p in meta_dir(out).iterdir()) == [CANARIES_FILE, "manifest.json"]


def test_refusals_name_no_secret(corpus, planted, tmp_path, key_file):
    out, _ = planted
    planted_secrets = [c["secret"] for c in read_canaries(out).to_pylist()]
    errors = []
    for bad, match in [
        (SECRET[:31], "31 bytes"),
        (b"0" * 64, "repeats a short pattern"),
    ]:
        with pytest.raises(ConfigError, match=match) as e:
            api.canaries(corpus, tmp_path / "x", secret_file=key_file(bad), n=5)
        errors.append(str(e.value))
    with pytest.raises(ConfigError, match=r"41 canaries need 41 patients.*have 40") as e:
        api.canaries(corpus, tmp_path / "x", secret_file=key_file(SECRET), n=41)
    errors.append(str(e.value))
    for kw in ({"n": 0}, {"repeats": ""}, {"repeats": "4,4"}, {"repeats": "0"},
               {"kinds": "ssn"}, {"kinds": ""}):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            api.canaries(corpus, tmp_path / "x", secret_file=key_file(SECRET), **kw)
        errors.append(str(e.value))
    with pytest.raises(InputError, match="three times") as e:
        api.canaries(pa.RecordBatchReader.from_batches(
            small_docs({"a": 1}).schema, small_docs({"a": 1}).to_batches()
        ), tmp_path / "x", secret_file=key_file(SECRET), n=1)  # fmt: skip
    errors.append(str(e.value))
    with pytest.raises(InputError, match="doc_id") as e:
        api.canaries(
            small_docs({"a": 1}).drop(["doc_id"]), tmp_path / "x", secret_file=key_file(SECRET), n=1
        )
    errors.append(str(e.value))
    assert not (tmp_path / "x").exists()
    for msg in errors:
        assert SECRET.decode()[:16] not in msg
        assert not any(s in msg for s in planted_secrets)


def test_read_canaries_refuses_other_datasets(corpus, tmp_path):
    with pytest.raises(InputError, match="not a canaries output") as e:
        read_canaries(corpus)
    assert str(corpus) in str(e.value)
    with pytest.raises(InputError, match="no such dataset folder"):
        read_canaries(tmp_path / "missing")


def canaries_command(corpus, out, n, repeats, kinds, key, overwrite):
    """What `phisieve canaries` runs: the stage with the key read from its file."""
    stage = CanariesStage(n=n, repeats=repeats, kinds=kinds)
    return run_stage(stage, {"docs": corpus, "secret-file": key}, out, overwrite=overwrite)


def test_canaries_command(corpus, planted, tmp_path):
    out, _ = planted
    key = tmp_path / "key.txt"
    key.write_bytes(SECRET + b"\n")
    manifest = canaries_command(corpus, tmp_path / "cmd", 30, "1, 4,16", "name,date,mrn", key,
                                False)  # fmt: skip
    assert manifest["canaries"] == 30
    assert side_file(tmp_path / "cmd", CANARIES_FILE).read_bytes() == (
        side_file(out, CANARIES_FILE).read_bytes()
    )
    for repeats, kinds in [("0", "mrn"), ("a", "mrn"), ("1,,4", "mrn"), ("-1", "mrn"),
                           ("4,4", "mrn"), ("1", "mrn,ssn"), ("1", "")]:  # fmt: skip
        with pytest.raises(ConfigError):
            canaries_command(corpus, tmp_path / "bad", 3, repeats, kinds, key, False)
    # A key inside the output is refused before anything is written.
    with pytest.raises(PhisieveError, match="must not be, contain or lie in an input"):
        canaries_command(corpus, tmp_path, 3, "1", "mrn", key, True)
    assert not (tmp_path / "bad").exists()


# -- canary patients, planted by a coin (the audit's one-run lower bound on ε) ------------


@pytest.fixture(scope="module")
def coined(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory, key_file: Callable[[bytes], Path]
) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("canaries") / "coin"
    manifest = api.canaries(
        corpus,
        out,
        secret_file=key_file(SECRET),
        n=50,
        repeats="4,16",
        new_patients=True,
        coin=True,
    )
    return out, manifest


def test_canary_patients_are_new_patients_planted_by_a_keyed_coin(corpus, coined):
    out, manifest = coined
    rows = read_canaries(out).to_pylist()
    assert [r["canary_id"] for r in rows] == [f"canary-{i:03d}" for i in range(50)]
    assert all(r["new_patient"] and r["kind"] == "words" for r in rows)
    assert [r["patient_id"] for r in rows] == [f"patient-{r['canary_id']}" for r in rows]
    # The coin: the low bit of a keyed draw of the canary's id, nothing else.
    for r in rows:
        assert r["included"] == bool(hmac_draw(SECRET, "coin", r["canary_id"]) & 1)
        assert r["doc_ids"] == ([r["canary_id"]] if r["included"] else [])
        assert len(r["secret"].split(" ")) == 8 and set(r["secret"].split(" ")) <= set(WORDS)
    planted = [r for r in rows if r["included"]]
    assert 15 <= len(planted) <= 35  # 50 fair coins
    assert manifest["planted"] == len(planted) == manifest["new_patients"]
    assert manifest["insertions"] == sum(r["repeats"] for r in planted)
    # The input's rows come first, unchanged; then one note per planted canary patient: its
    # sentence once per line, repeats times; the other columns empty.
    before, after = read(corpus), read(out)
    assert after.slice(0, before.num_rows).equals(before)
    added = after.slice(before.num_rows).to_pylist()
    assert [a["patient_id"] for a in added] == [r["patient_id"] for r in planted]
    for a, r in zip(added, planted, strict=True):
        assert a["doc_id"] == r["canary_id"] and a["group_id"] is None
        assert a["text"] == "\n".join([sentence(r)] * r["repeats"])
        assert a["category"] == "" and a["chartdate"] == ""
    assert not (
        set(read(corpus).column("patient_id").to_pylist()) & {r["patient_id"] for r in rows}
    )


def test_another_key_flips_other_coins(corpus, coined, tmp_path, key_file):
    out, _ = coined
    other = api.canaries(
        corpus, tmp_path / "o", secret_file=key_file(OTHER_SECRET), n=50, repeats="4,16",
        new_patients=True, coin=True,
    )  # fmt: skip
    assert other["planted"] != 0
    mine = [r["included"] for r in read_canaries(out).to_pylist()]
    theirs = [r["included"] for r in read_canaries(tmp_path / "o").to_pylist()]
    assert mine != theirs


def test_a_coin_needs_new_patients_and_new_ids(corpus, tmp_path, key_file):
    with pytest.raises(ConfigError, match="--coin needs --new-patients"):
        api.canaries(corpus, tmp_path / "a", secret_file=key_file(SECRET), n=5, coin=True)
    docs = read(corpus)
    clash = docs.set_column(
        1, "patient_id", pa.array(["patient-canary-001"] * docs.num_rows, pa.string())
    )
    with pytest.raises(InputError, match="already has a patient named like a canary"):
        api.canaries(clash, tmp_path / "b", secret_file=key_file(SECRET), n=5, new_patients=True)
    numbers = docs.set_column(0, "doc_id", pa.array(range(docs.num_rows), pa.int64()))
    with pytest.raises(InputError, match="text ids"):
        api.canaries(numbers, tmp_path / "c", secret_file=key_file(SECRET), n=5, new_patients=True)
    assert not any((tmp_path / x).exists() for x in "abc")


def test_older_canary_files_read_as_planted_in_patients_notes(planted, tmp_path):
    out, _ = planted
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    shutil.copytree(meta_dir(out), meta_dir(copy))
    f = side_file(copy, CANARIES_FILE)
    pq.write_table(pq.read_table(f).drop_columns(["new_patient", "included"]), f)
    t = read_canaries(copy)
    assert t.column("new_patient").to_pylist() == [False] * 30
    assert t.column("included").to_pylist() == [True] * 30
