"""Child process for the crash-consistency test: append demo blocks to a ledger until killed.

Usage: python _crash_child.py LEDGER_DIR  (creates the ledger if absent, resumes at its height)
Prints "ready <height>" once the store is open, then appends forever.
"""

import importlib.util
import sys
from pathlib import Path

from ledger.store import create_ledger, open_ledger


def _ledger_demo() -> type:
    """``sim.LedgerDemo`` without importing the ``sim`` package (its ``__init__`` imports torch: ~3 s a start,
    and the test starts this child 24 times). The module itself imports only ``ledger``."""
    path = Path(__file__).resolve().parents[2] / "sim" / "_ledger_demo.py"
    spec = importlib.util.spec_from_file_location("_crash_child_ledger_demo", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module.LedgerDemo  # type: ignore[no-any-return]


LedgerDemo = _ledger_demo()


def main() -> None:
    path = Path(sys.argv[1])
    demo = LedgerDemo(members=7, committee_size=4, updates_per_block=5, floats_per_update=512, seed=3)
    if (path / "chain.sqlite").exists():
        store, blobs = open_ledger(path)
    else:
        store, blobs = create_ledger(path, demo.genesis)
    for _ in range(store.height()):  # fast-forward the deterministic generator to the stored head
        demo.next_block()
    assert demo.state.head_hash == store.head_hash(), "stored chain is not the demo chain"
    print(f"ready {store.height()}", flush=True)
    while True:
        block, bl = demo.next_block()
        for data in bl.values():
            blobs.put(data)
        store.append(block)


if __name__ == "__main__":
    main()
