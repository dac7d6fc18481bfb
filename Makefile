# concilium — set-up, main job, tests. `make run` and `make test` each do all set-up on a fresh machine.
#
#   make run      the main job: a local multi-node simulation (scenarios/quickstart.toml) into results/
#   make test     the test suite (what CI runs: .ci/run)
#   make bench    the benchmarks (see benchmarks/README.md)
#
# PyTorch: an unpinned `torch` pulls a multi-GB CUDA build, so the CPU build is pinned here.
# GPU users: `make TORCH_SPEC=torch==2.13.0 TORCH_PIP_ARGS="--index-url <your CUDA wheel index>" test`,
# or install torch into .venv yourself first (an existing torch is left alone).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python
STAMP := $(VENV)/.concilium-installed

.PHONY: run test bench venv system-deps clean

run: $(STAMP)
	$(VENV)/bin/concilium sim run scenarios/quickstart.toml

test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

bench: $(STAMP)
	$(PY) benchmarks/ledger_bench.py
	$(PY) benchmarks/sim_overhead.py

venv: $(STAMP)

system-deps:
	PYTHON=$(PYTHON) ./scripts/ensure-system-deps.sh

$(STAMP): pyproject.toml Makefile
	PYTHON=$(PYTHON) ./scripts/ensure-system-deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[net,dev,ray,web]"
	$(PY) -c "import torch, libp2p, ledger; print('concilium environment ready: torch', torch.__version__)"
	touch $(STAMP)

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis build *.egg-info
