"""Decode bombs: what one hostile frame costs the envelope decoder, before and after the bounds.

Each case decodes one frame in a fresh process (so peak RSS is its own): the frame is built first, then the kernel's
peak-RSS mark is reset (``/proc/self/clear_refs``), the frame decoded, and the peak read back (``VmHWM``). Printed
per case: CPU seconds of the decode, the decode's own peak above the frame (MiB), and the whole cost of the frame
(frame + decode peak) as a multiple of its size: what a node that read the frame into memory pays for it.

* ``old``: ``Envelope.decode`` as it was (``ledger.decode`` without a budget: msgpack builds everything, then the
  checks), kept as ``decode(data)`` unbounded;
* ``new``: ``node._wire.decode_envelope`` (the canonical prefix tells the field, the field the budget, and
  ``ledger._encoding.scan`` refuses past it before anything is built).

Bombs: ``msg-maps`` (16 MiB: an array of empty maps, ~80 bytes of objects per byte), ``msg-fixarrays`` (16 MiB:
``[[{}], [{}], ...]``), each bare and inside an envelope's ``pbft`` field (``env-*``: past the prefix check, into
the budgeted scan), and ``env-msg-nested`` (16 MiB: arrays of 65,535 empty maps in a ``pbft`` field, each array
within the budget on its own, so the scan walks its whole budget of items before it refuses: the slowest bomb); ``blob-48`` and ``blob-255`` (48 and 255 MiB of empty maps as a ``blobs`` envelope's value,
most objects per byte) and ``blob-255-keys`` (255 MiB of ``{"": {}}`` maps as an ``update`` envelope's value). For scale, ``honest-blob-255``: a valid 255 MiB ``blobs`` envelope (one blob).

``--old-max-mib`` (default 48) skips the old decoder above that size: 255 MiB of empty maps would take it ~20 GiB.

Usage: ``.venv/bin/python benchmarks/decode_bombs.py [--cases ...] [--old-max-mib 48] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20

CASES = ["msg-maps", "msg-fixarrays", "env-msg-maps", "env-msg-fixarrays", "env-msg-nested", "blob-48", "blob-255", "blob-255-keys",
         "honest-blob-255"]


def _array(total: int, item: bytes, head: bytes = b"", tail: bytes = b"") -> bytes:
    count = (total - len(head) - len(tail) - 5) // len(item)
    return head + b"\xdd" + count.to_bytes(4, "big") + item * count + tail


KINDS = ("blobs", "pbft", "scores", "update", "want")  # an envelope's fields, in their canonical order


def _head(field: str) -> bytes:
    """What a canonical envelope of ``field`` starts with: its map header, then the fields before it, all nil."""
    fields = KINDS[:KINDS.index(field) + 1]
    return b"\x85" + b"\xc0".join(bytes([0xA0 | len(k)]) + k.encode() for k in fields)


def _tail(field: str) -> bytes:
    return b"".join(bytes([0xA0 | len(k)]) + k.encode() + b"\xc0" for k in KINDS[KINDS.index(field) + 1:])


def _envelope(field: str, total: int, item: bytes) -> bytes:
    return _array(total, item, _head(field), _tail(field))


def build(case: str) -> bytes:
    if case == "msg-maps":
        return _array(16 * MIB, b"\x80")
    if case == "msg-fixarrays":
        return _array(16 * MIB, b"\x91\x80")
    if case == "env-msg-maps":
        return _envelope("pbft", 16 * MIB, b"\x80")
    if case == "env-msg-fixarrays":
        return _envelope("pbft", 16 * MIB, b"\x91\x80")
    if case == "env-msg-nested":  # [[{} x 65535] x 256]: each inner header within the budget, the scan walks
        inner = b"\xdc\xff\xff" + b"\x80" * 0xFFFF
        count = (16 * MIB - 64) // len(inner)
        return _head("pbft") + b"\xdc" + count.to_bytes(2, "big") + inner * count + _tail("pbft")
    if case == "blob-48":
        return _envelope("blobs", 48 * MIB, b"\x80")
    if case == "blob-255":
        return _envelope("blobs", 255 * MIB, b"\x80")
    if case == "blob-255-keys":  # an update envelope whose value is [{"": {}}, ...]: two dicts per 3 bytes
        return _envelope("update", 255 * MIB, b"\x81\xa0\x80")
    if case == "honest-blob-255":
        from node.core import Envelope  # noqa: PLC0415

        return Envelope(blobs=(os.urandom(255 * MIB - 64),)).encode()
    raise SystemExit(f"unknown case {case}")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def one(case: str, decoder: str) -> dict[str, object]:
    """Decode one frame in this process; measure CPU and the peak RSS above the RSS with the frame built."""
    from ledger import DecodeError  # noqa: PLC0415
    from node.core import Envelope, EnvelopeDecoder  # noqa: PLC0415

    decode_envelope = EnvelopeDecoder(memo_bytes=0).decode  # node._wire.decode_envelope, with no memo

    data = build(case)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _status("VmRSS")
    t0, w0 = time.process_time(), time.perf_counter()
    try:
        if decoder == "old":
            Envelope.decode(data, bytes_max=256 * MIB)  # (= ENVELOPE_BYTES_MAX)
        else:
            decode_envelope(data)
        verdict = "accepted"
    except DecodeError as e:
        verdict = f"refused: {str(e)[:70]}"
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    peak = _status("VmHWM") - base
    return {"case": case, "decoder": decoder, "frame_mib": round(len(data) / MIB, 1), "cpu_s": round(cpu, 3),
            "wall_s": round(wall, 3), "decode_peak_mib": round(peak / MIB, 1),
            "cost_x_frame": round((peak + len(data)) / len(data), 2), "verdict": verdict}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="*", default=CASES, choices=CASES)
    ap.add_argument("--decoders", nargs="*", default=["old", "new"], choices=["old", "new"])
    ap.add_argument("--old-max-mib", type=int, default=48)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--one", nargs=2, metavar=("CASE", "DECODER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    rows = []
    for case in args.cases:
        for decoder in args.decoders:
            if decoder == "old" and case.startswith("blob-") and int(case.split("-")[1]) > args.old_max_mib:
                rows.append({"case": case, "decoder": "old", "verdict": f"not run (over --old-max-mib {args.old_max_mib})"})
                continue
            out = subprocess.run([sys.executable, __file__, "--one", case, decoder], cwd=ROOT, capture_output=True,
                                 text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
            if out.returncode:
                rows.append({"case": case, "decoder": decoder, "verdict": f"crashed: {out.stderr.strip()[-200:]}"})
            else:
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'case':<18} {'decoder':<7} {'frame MiB':>9} {'CPU s':>7} {'decode peak MiB':>15} {'cost/frame':>10}  verdict")
    for r in rows:
        print(f"{r['case']:<18} {r['decoder']:<7} {r.get('frame_mib', ''):>9} {r.get('cpu_s', ''):>7} "
              f"{r.get('decode_peak_mib', ''):>15} {r.get('cost_x_frame', ''):>10}  {r['verdict']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
