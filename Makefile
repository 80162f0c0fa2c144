# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install system-tools demo demo-web test bench docs clean

install: $(STAMP)

# Pinned from constraints.txt; torch is pinned exactly so no open range pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[ner,test,hf,sweep,dask,web]'
	touch $(STAMP)

demo: install
	$(BIN)/corpusmill run configs/demo.yaml

# The web demo: the shipped crawl's WARC records to a trained model (docs/inputs.md, docs/extract.md).
demo-web: install
	$(BIN)/corpusmill run configs/web.yaml

# The report's browser test (headless Chromium), the alert-rule check (promtool) and the Slurm test (a single-node
# Slurm: munged, slurmctld, slurmd and sbatch, tests/slurm_node.py) need Debian packages.
# Installed here when missing (root with apt-get); elsewhere one line says what to install and those tests fail.
SYSTEM_TOOLS := chromium:chromium chromedriver:chromium-driver promtool:prometheus \
	munged:munge slurmctld:slurm-wlm slurmd:slurm-wlm sbatch:slurm-wlm
system-tools:
	@need=""; for pair in $(SYSTEM_TOOLS); do command -v $${pair%%:*} >/dev/null 2>&1 || need="$$need $${pair#*:}"; done; \
	if [ -z "$$need" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing$$need (Debian packages for the browser, promtool and Slurm tests)"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need >/dev/null; \
	else \
		echo "missing Debian packages:$$need (apt-get install -y$$need as root); the browser, promtool and Slurm tests will fail" >&2; \
	fi

# Three workers, a whole test file each (module fixtures built once); the longest files start first (tests/conftest.py).
# Three on two cores: many tests wait on their subprocesses (torchrun, Dask, Slurm, Chromium), and with other work
# on the machine a third worker keeps the suite's share of the cores (two workers: 15.4 min on 2 cores, 1.7 busy).
TEST_WORKERS ?= 3
test: install system-tools
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: install
	$(BIN)/python benchmarks/bench_backbone.py

# docs/config.md is generated from the config models' field descriptions (tests/test_docs.py checks it is current).
docs: install
	$(BIN)/python -m pipelines.config_reference

clean:
	rm -rf runs .pytest_cache
