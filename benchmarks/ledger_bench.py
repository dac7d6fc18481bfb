"""Ledger benchmark: append rate and full-verify rate against the raw Ed25519 verify bound.

Workload: a 1,000-block chain, 10 signed update commitments and a 7-signature commit
certificate per block (committee of 10, BFT quorum 7), stored in SQLite (WAL, synchronous=FULL) with
its update and model blobs. Everything is measured in the same process and run, because the machines
are shared and noisy: the figure of merit is the *ratio* of our verify throughput to the bound set by
raw Ed25519 verification with the same library (libsodium through PyNaCl, what ``ledger`` verifies
with) on the same machine. OpenSSL's rate (``cryptography``, what ``ledger`` used before) is shown
next to it when installed.

    python benchmarks/ledger_bench.py [--blocks 1000] [--repeat 3] [--json out.json]

Prints a markdown table. Goal: verify throughput >= 0.8x the raw signature-verify bound.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nacl.bindings import crypto_sign, crypto_sign_open, crypto_sign_seed_keypair

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledger import audit_chain  # noqa: E402
from ledger.store import create_ledger, open_ledger  # noqa: E402
from ledger.testing import LedgerDemo  # noqa: E402

SIGS_PER_BLOCK = 10 + 7


def raw_verify_rate(n: int = 5000) -> float:
    """Ed25519 verifications per second, libsodium (PyNaCl bindings, as ``ledger`` calls it), 100-byte messages."""
    pk, sk = crypto_sign_seed_keypair(bytes(range(32)))
    msgs = [bytes([i % 256]) * 100 for i in range(n)]
    sigs = [crypto_sign(m, sk)[:64] for m in msgs]
    t = time.perf_counter()
    for m, s in zip(msgs, sigs):
        crypto_sign_open(s + m, pk)
    return n / (time.perf_counter() - t)


def openssl_verify_rate(n: int = 5000) -> float | None:
    """The same with OpenSSL (``cryptography``, pre-parsed key), if installed: a reference only."""
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: PLC0415
    except ImportError:
        return None
    sk = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    pk = sk.public_key()
    msgs = [bytes([i % 256]) * 100 for i in range(n)]
    sigs = [sk.sign(m) for m in msgs]
    t = time.perf_counter()
    for m, s in zip(msgs, sigs):
        pk.verify(s, m)
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3, help="timed verify passes (median reported)")
    ap.add_argument("--json", help="also write the figures as JSON here")
    args = ap.parse_args()

    demo = LedgerDemo(members=16, committee_size=10, updates_per_block=10, floats_per_update=64, seed=7)
    blocks = [demo.next_block() for _ in range(args.blocks)]
    assert all(len(b.certificate.signatures) == 7 and len(b.payload.updates) == 10 for b, _ in blocks)

    with tempfile.TemporaryDirectory() as tmp:
        store, blobs = create_ledger(Path(tmp) / "ledger", demo.genesis)
        for _, bl in blocks:
            for data in bl.values():
                blobs.put(data)
        t = time.perf_counter()
        for b, _ in blocks:
            store.append(b)
        append_s = time.perf_counter() - t
        store.close()

        raw_rates, openssl_rates, with_blobs, without_blobs = [], [], [], []
        for _ in range(args.repeat):
            raw_rates.append(raw_verify_rate())
            openssl_rates.append(openssl_verify_rate())
            for sink, use_blobs in ((with_blobs, True), (without_blobs, False)):
                st, bs = open_ledger(Path(tmp) / "ledger", readonly=True, check_index=False)
                t = time.perf_counter()
                rep = audit_chain(st.genesis(), st.iter_rows(), blobs=bs if use_blobs else None)
                sink.append(time.perf_counter() - t)
                st.close()
                assert rep.ok and rep.height == args.blocks, rep.line()
            raw_rates.append(raw_verify_rate())

    raw = statistics.median(raw_rates)
    openssl = None if None in openssl_rates else statistics.median(openssl_rates)  # type: ignore[type-var]
    bound_bps = raw / SIGS_PER_BLOCK
    v_blobs = args.blocks / statistics.median(with_blobs)
    v_plain = args.blocks / statistics.median(without_blobs)
    rows = [
        ("raw Ed25519 verify (libsodium, as ledger verifies)", f"{raw:,.0f} sig/s", "-"),
        *([("raw Ed25519 verify (OpenSSL via cryptography; reference)", f"{openssl:,.0f} sig/s", "-")] if openssl else []),
        (f"bound: {SIGS_PER_BLOCK} sigs/block", f"{bound_bps:,.0f} blocks/s", "1.00"),
        ("append (SQLite WAL, synchronous=FULL)", f"{args.blocks / append_s:,.0f} blocks/s", "-"),
        ("full verify, signatures+chain+Merkle", f"{v_plain:,.0f} blocks/s", f"{v_plain / bound_bps:.2f}"),
        ("full verify + every blob re-hashed", f"{v_blobs:,.0f} blocks/s", f"{v_blobs / bound_bps:.2f}"),
    ]
    print(f"ledger_bench: {args.blocks} blocks, 10 updates + 7 commit signatures per block, median of {args.repeat}")
    print("| measure | rate | × signature bound |")
    print("|---|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    figures = {
        "blocks": args.blocks,
        "raw_verify_per_s": raw,
        "openssl_verify_per_s": openssl,
        "bound_blocks_per_s": bound_bps,
        "append_blocks_per_s": args.blocks / append_s,
        "verify_blocks_per_s": v_plain,
        "verify_with_blobs_blocks_per_s": v_blobs,
        "ratio_verify_to_bound": v_plain / bound_bps,
        "ratio_verify_with_blobs_to_bound": v_blobs / bound_bps,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
