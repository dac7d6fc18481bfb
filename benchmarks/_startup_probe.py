"""``concilium`` with timers: where a ``node start`` spends its time until ``started`` (benchmarks/startup_bench.py).

    BENCH_LAUNCH=<time.time() at Popen> python benchmarks/_startup_probe.py node start ...

Imports the heavy packages one group at a time first (each group's time is what it adds to the ones before), then
wraps the functions ``node start`` calls on its way to ``started`` with timers (the command itself is unchanged: it
finds the wrapped functions where it imports them from), and when the node logs ``started`` prints one line to
stderr: ``BENCH {"python_s": ..., "imports": {...}, "phases": {...}, "started_s": ...}``, all in seconds (python_s:
from the launch to this file's first line, the interpreter's own start; started_s: from the launch to ``started``).
"""

from __future__ import annotations

import time

T_FIRST = time.time()

import functools  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

IMPORT_GROUPS = (
    ("concilium.cli", ("concilium.cli",)),
    ("numpy", ("numpy",)),
    ("torch", ("torch",)),
    ("trio", ("trio",)),
    ("libp2p", ("libp2p",)),
    ("learning", ("learning",)),
    ("node.runtime", ("node.runtime",)),
    ("node.world + node.apps", ("node.world", "node.apps")),
)

imports: dict[str, float] = {}
for label, modules in IMPORT_GROUPS:
    t = time.perf_counter()
    for m in modules:
        importlib.import_module(m)
    imports[label] = time.perf_counter() - t
T_IMPORTED = time.time()

phases: dict[str, float] = {}


def _timed(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper that adds its wall time to ``phases[label]``."""
    raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    fn = raw.__func__ if kind is not None else raw

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            phases[label] = phases.get(label, 0.0) + time.perf_counter() - t

    setattr(owner, name, kind(wrapper) if kind is not None else wrapper)


def _instrument() -> None:
    import learning
    import node.apps
    import node.config
    import node.keys
    import node.runtime
    import node.runtime as rt
    import node.world as world

    _timed(node.config, "load_genesis", "genesis")
    _timed(node.keys, "load_key", "key")
    _timed(node.config, "check_listen", "listen check")
    _timed(node.runtime, "check_data_dir", "data dir checks")
    _timed(node.apps, "load_pinned_app", "app")
    _timed(world, "resolve_device", "device")
    _timed(learning.LocalData, "from_params", "data (describe)")
    _timed(world.MemberWorld, "build", "world (data load, model, trainer)")
    _timed(world, "network_adversary", "adversary")
    _timed(world, "check_rounds_plan", "first-round check")
    _timed(rt.NodeRuntime, "__init__", "runtime (ledger, core, transport)")
    _timed(rt.NodeRuntime, "_refusal", "listen check, ledger for writing")
    log_call = rt.EventLog.__call__
    run_entered: list[float] = []
    _run = rt.NodeRuntime.run

    async def run(self: Any, *args: Any, **kwargs: Any) -> None:
        run_entered.append(time.perf_counter())
        await _run(self, *args, **kwargs)

    rt.NodeRuntime.run = run  # type: ignore[method-assign]

    def logged(self: Any, event: str, *args: Any, **fields: Any) -> None:
        log_call(self, event, *args, **fields)
        if event == "started":
            now = time.time()
            phases["run: transport up to started"] = time.perf_counter() - run_entered[0]
            launch = float(os.environ.get("BENCH_LAUNCH", T_FIRST))
            line = {"python_s": T_FIRST - launch, "imports": imports, "phases": phases,
                    "imported_to_started_s": now - T_IMPORTED, "started_s": now - launch}
            print("BENCH " + json.dumps(line), file=sys.stderr, flush=True)

    rt.EventLog.__call__ = logged  # type: ignore[method-assign]


if __name__ == "__main__":
    _instrument()
    from concilium.cli import main

    sys.exit(main(sys.argv[1:]))
