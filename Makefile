# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench docs clean

install: $(STAMP)

# Pinned from constraints.txt; torch is pinned exactly so no open range pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[ner,test,hf,sweep,dask]'
	touch $(STAMP)

demo: install
	$(BIN)/corpusmill run configs/demo.yaml

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python benchmarks/bench_backbone.py

# docs/config.md is generated from the config models' field descriptions (tests/test_docs.py checks it is current).
docs: install
	$(BIN)/python -m pipelines.config_reference

clean:
	rm -rf runs .pytest_cache
