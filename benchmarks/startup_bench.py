"""Start-up benchmark: from launching ``concilium node start`` to the node's ``started`` line.

Goal: at most 3 s from launch to ``started`` on the 2-core development machine.

    python benchmarks/startup_bench.py [--nodes 4] [--repeat 5] [--mode both|together|alone] [--no-breakdown]
                                       [--bytecode-cache DIR] [--goal-s 3] [--json out.json]

Initialises an N-node testnet in a temporary folder (``concilium testnet init``), then per repetition launches the
node processes (``python -m concilium node start --config nodes/node-<i>/node.toml --log-format json``, each with a
fresh data dir, so each start creates its ledger) and takes, per node, the time from just before its launch to the
``ts`` of its JSON log line with event ``started`` (the transport listens; what comes after, waiting for peers and
rounds, is not start-up). Then the nodes are stopped (SIGTERM).

* ``together``: the N nodes launched at once (how a testnet starts; on 2 cores they share the CPU).
* ``alone``: one node at a time, stopped before the next is launched (one start on an otherwise idle machine).

Reports the median and min-max of each mode, and (unless ``--no-breakdown``) where one start's time goes: the
imports that take longest (``python -X importtime``, cumulative, the top-level modules of each package), and one
instrumented start (``benchmarks/_startup_probe.py``: the interpreter's own start, each heavy import group, then each
step from the config to ``started``: key, genesis, data dir checks, data and model, first-round check, ledger, core
and transport, listening). Exit 1 if the median of ``alone`` is over ``--goal-s`` (the goal is one node's start;
``together`` is CPU-bound: N starts of about 1.5-2 CPU-seconds each on the machine's cores). The machine's load
average is printed with the figures: other processes on it skew them.

``--bytecode-cache DIR``: the node processes write and read compiled bytecode under DIR (``PYTHONPYCACHEPREFIX``),
even where the environment says ``PYTHONDONTWRITEBYTECODE`` (then every start compiles concilium's own modules from
source, about 0.15-0.2 s of CPU here; an installed package or a container image has its bytecode). One warm-up start
fills DIR first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().parent / "_startup_probe.py"
STARTED_TIMEOUT_S = 120.0
ENV = dict(os.environ)
"""The node processes' environment (``--bytecode-cache`` changes it)."""
NESTED = ("listen check, ledger for writing",)
"""Probe phases inside others (the runtime's construction; the run up to started)."""


def init_testnet(out: Path, nodes: int) -> list[Path]:
    """``concilium testnet init`` of the bundled testnet scenario with ``nodes`` members on free ports of 127.0.0.1;
    the node configs."""
    sys.path.insert(0, str(ROOT))
    from concilium.ports import free_port_block  # noqa: PLC0415

    cmd = [sys.executable, "-m", "concilium", "testnet", "init", "--nodes", str(nodes), "--out", str(out),
           "--base-port", str(free_port_block(nodes))]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, timeout=300)
    return [out / "nodes" / f"node-{i}" / "node.toml" for i in range(nodes)]


class Node:
    """One launched ``node start``: its launch time, and the seconds to its ``started`` line once read."""

    def __init__(self, config: Path, data_dir: Path, *, probe: bool = False) -> None:
        head = [sys.executable, str(PROBE)] if probe else [sys.executable, "-m", "concilium"]
        self.launched = time.time()
        env = {**ENV, "BENCH_LAUNCH": repr(self.launched)}
        self.proc = subprocess.Popen(
            [*head, "node", "start", "--config", str(config), "--data-dir", str(data_dir), "--log-format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.started_s: float | None = None
        self.cpu_s: float | None = None
        """The CPU time (user + system) the process had used when its ``started`` line was read (Linux)."""
        self.probe: dict[str, object] | None = None
        self.errors: list[str] = []
        self._started = threading.Event()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{") and self.started_s is None:
                event = json.loads(line)
                if event.get("event") == "started":
                    self.started_s = float(event["ts"]) - self.launched
                    self.cpu_s = _cpu_seconds(self.proc.pid)
                    self._started.set()
        self._started.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("BENCH "):
                self.probe = json.loads(line[len("BENCH "):])
            else:
                self.errors.append(line)

    def wait_started(self) -> float:
        self._started.wait(STARTED_TIMEOUT_S)
        if self.started_s is None:
            self.stop()
            raise RuntimeError(f"no started line (exit {self.proc.returncode}): {''.join(self.errors)[-2000:]}")
        return self.started_s

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def run_together(configs: list[Path], tmp: Path, rep: int) -> list[Node]:
    nodes = [Node(c, tmp / f"together-{rep}" / f"node-{i}") for i, c in enumerate(configs)]
    try:
        for n in nodes:
            n.wait_started()
        return nodes
    finally:
        for n in nodes:
            n.stop()


def run_alone(configs: list[Path], tmp: Path, rep: int, *, probe: bool = False) -> list[Node]:
    done = []
    for i, c in enumerate(configs):
        n = Node(c, tmp / f"alone-{rep}" / f"node-{i}", probe=probe)
        try:
            n.wait_started()
        finally:
            n.stop()
        done.append(n)
    return done


def top_imports(config: Path, data_dir: Path, count: int) -> list[tuple[str, float]]:
    """The ``count`` slowest imports of one start (``-X importtime``, cumulative): each package's top-level module
    and the direct imports of concilium's own packages."""
    with tempfile.TemporaryFile("w+") as log:  # (a file: the import log would fill a pipe nobody reads yet)
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "concilium", "node", "start", "--config",
                                 str(config), "--data-dir", str(data_dir), "--log-format", "json"],
                                stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT, env=ENV)
        assert proc.stdout is not None
        for line in proc.stdout:
            if '"event": "started"' in line:
                break
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        log.seek(0)
        err = log.read()
    ours = ("concilium", "node", "learning", "ledger", "consensus")
    rows = []
    for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", err, re.M):
        cumulative_us, depth, name = int(m.group(1)), len(m.group(2)), m.group(3)
        top = name.split(".")[0]
        if "." not in name or (top in ours and depth <= 4):
            rows.append((name, cumulative_us / 1e6))
    rows.sort(key=lambda r: -r[1])
    return rows[:count]


def summary(values: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mode", choices=("both", "together", "alone"), default="both")
    ap.add_argument("--no-breakdown", action="store_true")
    ap.add_argument("--goal-s", type=float, default=3.0)
    ap.add_argument("--bytecode-cache", metavar="DIR", help="compiled bytecode for the node processes in DIR")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    modes = ("together", "alone") if args.mode == "both" else (args.mode,)
    if args.bytecode_cache:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = str(Path(args.bytecode_cache).resolve())
    out: dict[str, object] = {"nodes": args.nodes, "repeat": args.repeat, "cpus": os.cpu_count(),
                              "bytecode": "cached" if args.bytecode_cache else
                              ("compiled at each start" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "default"),
                              "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="concilium-startup-") as t:
        tmp = Path(t)
        configs = init_testnet(tmp / "net", args.nodes)
        if args.bytecode_cache:
            run_alone(configs[:1], tmp, -1)  # fills the cache
        times: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        for rep in range(args.repeat):
            for m in modes:
                nodes = run_together(configs, tmp, rep) if m == "together" else run_alone(configs, tmp, rep)
                times[m] += [n.started_s for n in nodes if n.started_s is not None]
                cpu[m] += [n.cpu_s for n in nodes if n.cpu_s is not None]
        out["load_after"] = os.getloadavg()
        failed = False
        print(f"launch -> started, {args.nodes} nodes x {args.repeat} repetitions, {os.cpu_count()} CPUs, "
              f"bytecode {out['bytecode']}, load average {out['load_before'][0]:.1f} before, "
              f"{out['load_after'][0]:.1f} after")
        for m in modes:
            s = summary(times[m])
            out[m] = {**s, "all_s": times[m], "cpu_s": cpu[m]}
            ok = s["median_s"] <= args.goal_s
            if m == "alone":
                failed |= not ok
                verdict = f"goal <= {args.goal_s:g} s: {'met' if ok else 'MISSED'}"
            else:
                verdict = f"({args.nodes} starts sharing {os.cpu_count()} CPUs; not judged)"
            cpu_median = f"{statistics.median(cpu[m]):.2f}" if cpu[m] else "n/a"
            print(f"  {m:8}  median {s['median_s']:.2f} s   min-max {s['min_s']:.2f}-{s['max_s']:.2f} s   "
                  f"(CPU per start: median {cpu_median} s)   {verdict}")
        if not args.no_breakdown:
            probe = run_alone(configs[:1], tmp, args.repeat, probe=True)[0].probe or {}
            out["breakdown"] = probe
            print(f"one start, instrumented (benchmarks/_startup_probe.py): {probe.get('started_s', 0):.2f} s")
            print(f"  {'interpreter start':44} {probe.get('python_s', 0):6.3f} s")
            for k, v in dict(probe.get("imports", {})).items():
                print(f"  import {k:37} {v:6.3f} s")
            phases = dict(probe.get("phases", {}))
            for k, v in phases.items():
                print(f"  {k:44} {v:6.3f} s")
            rest = float(probe.get("imported_to_started_s", 0)) - sum(v for k, v in phases.items() if k not in NESTED)
            print(f"  {'other (imports done to started)':44} {rest:6.3f} s")
            print(f"  (the {' and '.join(repr(k) for k in NESTED)} lines are parts of the lines above them)")
            top = top_imports(configs[0], tmp / "importtime", 12)
            out["top_imports"] = top
            print("slowest imports (python -X importtime, cumulative):")
            for name, s in top:
                print(f"  {name:44} {s:6.3f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
