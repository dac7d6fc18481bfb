#!/usr/bin/env bash
# GPU and quiet-CPU checks for a machine with a CUDA device (run from the repository root).
#   bash benchmarks/device_check.sh [OUTDIR]
# 1. the gpu-marked tests (training on CUDA, a simulation training on CUDA whose ledger verifies);
# 2. the simulation-overhead benchmark pinned to 2 quiet cores (as CI machines have), W1 and the 50-client variant.
# Python packages missing on the machine can be installed first (see README, "GPU checks").
set -u -o pipefail
OUT=${1:-results/device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt"
$PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$OUT/gpu.txt"
$PY -m pytest tests/learning/test_cuda.py -m gpu -p no:cacheprovider -W "ignore::DeprecationWarning" 2>&1 | tee "$OUT/gpu_tests.log"
# The CPU benchmark hides the GPU (CUDA_VISIBLE_DEVICES=): on a machine with CUDA devices, the plain loop's
# backward pass starts autograd's device threads and forked training workers would fall back in-process
# (tested above); hiding the device makes this a 2-core CPU machine, as CI machines are.
export CUDA_VISIBLE_DEVICES=
taskset -c 0,1 $PY benchmarks/sim_overhead.py --repeat 3 --no-torch --json "$OUT/w1_2cores.json" 2>&1 | tee "$OUT/w1_2cores.log"
taskset -c 0,1 $PY benchmarks/sim_overhead.py --repeat 3 --no-torch --no-inprocess --workers 2 --json "$OUT/w1_2cores_w2.json" 2>&1 | tee "$OUT/w1_2cores_w2.log"
taskset -c 0,1 $PY benchmarks/sim_overhead.py --repeat 2 --no-torch --clients 50 --rounds 20 --json "$OUT/c50_2cores.json" 2>&1 | tee "$OUT/c50_2cores.log"
