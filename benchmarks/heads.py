"""Ledger heads of every bundled scenario: the check that a change to the simulator, the node core or consensus
leaves every ledger as it was.

    python benchmarks/heads.py [--rounds 10] [--root DIR] [--reproducible] > heads.txt

Runs each ``scenarios/*.toml`` of ``--root`` (default: this checkout; e.g. ``git worktree add /tmp/before REV``)
for ``--rounds`` rounds, in-process (``workers=0``), with that checkout's code first on ``sys.path``, and prints one
line per scenario: name, the first 16 hex digits of the ledger head, view changes and evidence. Diff two outputs.
A default-mode head depends on the CPU; ``--reproducible`` runs in reproducible mode (``learning.reproducible``: this
script starts again in the mode's environment, then applies its in-process switches when ``--root``'s tree has them),
whose heads are the same on any x86-64 CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--reproducible", action="store_true", help="reproducible mode (the same heads on any x86-64 CPU)")
    args = ap.parse_args()
    if args.reproducible:
        here = str(Path(__file__).resolve().parents[1])
        sys.path.insert(0, here)
        from learning import reproducible  # noqa: PLC0415 - this checkout's

        reproducible.reexec()
        sys.path.remove(here)
        for name in [m for m in sys.modules if m == "learning" or m.startswith("learning.")]:
            del sys.modules[name]  # --root's own learning from here on
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    from sim import Simulation, load_scenario  # noqa: PLC0415 - from --root

    if args.reproducible:
        try:
            from learning import reproducible as mode  # noqa: PLC0415

            mode.configure()
        except ImportError:  # a tree from before the mode: its environment alone (portable kernels, one thread)
            import torch  # noqa: PLC0415

            torch.set_num_threads(1)

    for f in sorted((root / "scenarios").glob("*.toml")):
        try:
            res = Simulation(load_scenario(f, rounds=args.rounds), workers=0).run()
            print(f.name, res.head_hash.hex()[:16], "views", res.view_changes, "evidence", res.evidence, flush=True)
        except Exception as e:  # noqa: BLE001 - a scenario the tree cannot run is a line of the output
            print(f.name, "ERR", type(e).__name__, str(e)[:100], flush=True)


if __name__ == "__main__":
    main()
