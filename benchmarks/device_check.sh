#!/usr/bin/env bash
# GPU and quiet-CPU checks for a machine with a CUDA device (run from the repository root).
#   bash benchmarks/device_check.sh [OUTDIR]
# 1. the gpu-marked tests (training on CUDA, a simulation training on CUDA whose ledger verifies, forked
#    training workers falling back in-process after CUDA autograd);
# 2. the simulation-overhead benchmark pinned to 2 quiet cores (as CI machines have): W1 on two CPUs of
#    distinct physical cores and on two hyperthreads of one core where the machine has SMT, the 50-client
#    variant, and sim_variants.py (training workers 0/1/2 x results ledger off/on).
# Python packages missing on the machine can be installed first (see README, "GPU checks").
set -u -o pipefail
OUT=${1:-results/device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt"
$PY -c "import torch, sys, os; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'cpus', os.cpu_count())" | tee -a "$OUT/gpu.txt"
cat /proc/loadavg | tee -a "$OUT/gpu.txt"
$PY -m pytest tests/learning/test_cuda.py -m gpu -p no:cacheprovider -W "ignore::DeprecationWarning" 2>&1 | tee "$OUT/gpu_tests.log" | tail -3
# The CPU benchmarks hide the GPU (CUDA_VISIBLE_DEVICES=): on a machine with CUDA devices, the plain loop's
# backward pass starts autograd's device threads and forked training workers would fall back in-process
# (tested above); hiding the device makes this a 2-core CPU machine, as CI machines are.
export CUDA_VISIBLE_DEVICES=
show() { grep -E "ratio|In-process|^\| [a-z\`]|samples" "$1"; }
# Two CPUs of *different* physical cores (a 2-core CI machine has two cores, not two hyperthreads of one),
# and, for comparison, two hyperthreads of one core where the machine has SMT.
lscpu -e=CPU,CORE,SOCKET 2>/dev/null | tee "$OUT/topology.txt" | head -20
DISTINCT=$($PY - <<'PY'
import os, re
def core(c):
    with open(f"/sys/devices/system/cpu/cpu{c}/topology/core_id") as f, open(f"/sys/devices/system/cpu/cpu{c}/topology/physical_package_id") as g:
        return (g.read().strip(), f.read().strip())
cpus = sorted(os.sched_getaffinity(0))
a = cpus[2 % len(cpus)]
b = next((c for c in cpus if core(c) != core(a) and c > a), cpus[-1])
print(f"{a},{b}")
PY
)
SIBLINGS=$(cat /sys/devices/system/cpu/cpu2/topology/thread_siblings_list 2>/dev/null | tr '-' ',')
case "$SIBLINGS" in *,*) ;; *) SIBLINGS= ;; esac  # no SMT: no such pair
echo "distinct physical cores: $DISTINCT; hyperthreads of cpu2's core: ${SIBLINGS:-none (no SMT)}" | tee -a "$OUT/topology.txt"
for cores in $DISTINCT $SIBLINGS; do
  echo "== W1, cores $cores"
  taskset -c $cores $PY benchmarks/sim_overhead.py --repeat 5 --no-torch --json "$OUT/w1_cores${cores//,/-}.json" > "$OUT/w1_cores${cores//,/-}.log" 2>&1
  show "$OUT/w1_cores${cores//,/-}.log"
done
echo "== 50 clients x 20 rounds, cores $DISTINCT"
taskset -c $DISTINCT $PY benchmarks/sim_overhead.py --repeat 3 --no-torch --clients 50 --rounds 20 --json "$OUT/c50.json" > "$OUT/c50.log" 2>&1
show "$OUT/c50.log"
echo "== variants, cores $DISTINCT"
taskset -c $DISTINCT $PY benchmarks/sim_variants.py --repeat 3 --workers 0 1 2 2>&1 | tee "$OUT/variants.log"
