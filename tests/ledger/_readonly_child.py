"""Child process for the read-only audit tests: ``concilium`` commands run in-process, results as JSON.

Usage: python _readonly_child.py PROBE_DIR ARGV_LISTS_JSON

First tries to create a file in PROBE_DIR and reports the error it got (the test asserts that there was
one: the directory really is read-only for this process), then runs every argv list through
``concilium.cli.main`` and prints ``{"probe": ..., "runs": [{"code", "out", "err"}, ...]}``.
"""

import contextlib
import io
import json
import os
import sys
from pathlib import Path


def main() -> None:
    probe_dir, argv_lists = Path(sys.argv[1]), json.loads(sys.argv[2])
    try:
        (probe_dir / "probe").write_text("x")
        probe = "created"
    except OSError as e:
        probe = os.strerror(e.errno or 0)
    from concilium.cli import main as cli

    runs = []
    for argv in argv_lists:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli(argv)
        runs.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
    sys.stdout.write(json.dumps({"probe": probe, "runs": runs}))


if __name__ == "__main__":
    main()
