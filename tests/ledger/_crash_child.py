"""Child process for the crash-consistency test: append demo blocks to a ledger until killed.

Usage: python _crash_child.py LEDGER_DIR  (creates the ledger if absent, resumes at its height)
Prints "ready <height>" once the store is open, then appends forever.
"""

import sys
from pathlib import Path

from ledger.store import create_ledger, open_ledger
from ledger.testing import LedgerDemo  # imports only ledger: no torch in a child the test starts 24 times


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
