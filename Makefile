# concilium — set-up, main job, tests. `make run` and `make test` each do all set-up on a fresh machine.
#
#   make run      the main job: a local multi-node simulation (scenarios/quickstart.toml) into results/
#   make test     the test suite (what CI runs: .ci/run)
#   make bench    the benchmarks (see benchmarks/README.md)
#
# Two set-ups in one .venv, each a stamp:
#   core  (make run)   the pinned CPU torch + `pip install -e .`: what the simulation needs; every package is a
#                      wheel, so no compiler, no system package, no root
#   full  (make test, make bench)  the core, then the system packages (scripts/ensure-system-deps.sh: gcc, the
#                      Python headers and libgmp-dev for py-libp2p's fastecdsa; chromium for the explorer's
#                      browser tests) and the extras net, dev, ray, web, hf, installed into the same .venv
#
# PyTorch: an unpinned `torch` pulls a multi-GB CUDA build, so the CPU build is pinned here.
# GPU users: `make TORCH_SPEC=torch==2.13.0 TORCH_PIP_ARGS="--index-url <your CUDA wheel index>" test`,
# or install torch into .venv yourself first (an existing torch is left alone).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
TEST_WORKERS ?= 2
FULL_EXTRAS := net,dev,ray,web,hf
PY := $(VENV)/bin/python
CORE_STAMP := $(VENV)/.concilium-core
FULL_STAMP := $(VENV)/.concilium-full

.PHONY: run test bench venv venv-full system-deps clean

run: $(CORE_STAMP)
	$(VENV)/bin/concilium sim run scenarios/quickstart.toml

test: $(FULL_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

bench: $(FULL_STAMP)
	$(PY) benchmarks/ledger_bench.py
	$(PY) benchmarks/sim_overhead.py

venv: $(CORE_STAMP)

venv-full: $(FULL_STAMP)

system-deps:
	PYTHON=$(PYTHON) ./scripts/ensure-system-deps.sh

$(CORE_STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e .
	$(PY) -c "import torch, ledger, sim; print('concilium core environment ready: torch', torch.__version__)"
	touch $(CORE_STAMP)

$(FULL_STAMP): $(CORE_STAMP)
	PYTHON=$(PYTHON) ./scripts/ensure-system-deps.sh
	$(PY) -m pip install -q -e ".[$(FULL_EXTRAS)]"
	$(PY) -c "import torch, libp2p, ledger; print('concilium full environment ready: torch', torch.__version__)"
	touch $(FULL_STAMP)

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis build *.egg-info
