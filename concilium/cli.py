"""The ``concilium`` command line.

Departure from DESIGN.md ("node/ ... CLI"): the entry point lives in this thin top-level package
because it must dispatch both to ``node`` (keys, genesis, running a peer) and to ``sim`` (``concilium
sim run``), and the layering forbids ``node`` from importing ``sim``. Command logic stays in the
layers; this module only parses arguments, prints, and maps errors to exit codes:

* 0 success; 1 a verification found the ledger/proof invalid; 2 bad input (missing or wrong file,
  bad argument). Errors are one line ``concilium: error: <file>: <problem>`` and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ledger import (
    COMMITTEE_MODE,
    Genesis,
    InclusionProof,
    LedgerError,
    Member,
    ModelSpec,
    ProtocolParams,
    audit_chain,
    decode,
    make_proof,
    public_key_from_peer_id,
    sha256,
    to_json_value,
    verify_proof,
)
from ledger._types import MODES, QUORUM_RULES
from ledger.store import create_ledger, open_ledger
from node._errors import NodeError
from node.config import dump_genesis, load_genesis, record_to_toml
from node.keys import generate_key, load_key, save_key

__all__ = ["main"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A one-line user-facing error (exit code 2)."""


def _write_atomic(path: Path, text: str, *, overwrite: bool = True) -> None:
    if path.exists() and not overwrite:
        raise CliError(f"{path}: already exists (use --force to overwrite)")
    if not path.parent.is_dir():
        raise CliError(f"{path}: directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _emit(text: str, out: str | None, what: str) -> None:
    """Write ``text`` to ``out`` atomically (printing a one-line note), or print it."""
    if out:
        _write_atomic(Path(out), text + "\n")
        print(f"{out}: {what}")
    else:
        print(text)


# --- keygen ----------------------------------------------------------------------------------


def cmd_keygen(args: argparse.Namespace) -> int:
    key = generate_key()
    save_key(key, args.out, overwrite=args.force)
    print(key.peer_id)
    return EXIT_OK


# --- genesis ---------------------------------------------------------------------------------


def _parse_member(spec: str) -> Member:
    """``KEYFILE|PEERID[,name=NAME][,addr=MULTIADDR]...``."""
    head, *opts = spec.split(",")
    name, addrs = "", []
    for o in opts:
        k, sep, v = o.partition("=")
        if not sep or k not in ("name", "addr"):
            raise CliError(f"--member {spec!r}: options are name=... and addr=..., got {o!r}")
        if k == "name":
            name = v
        else:
            addrs.append(v)
    if head.startswith("12D3KooW") and not Path(head).exists():
        try:
            pk = public_key_from_peer_id(head)
        except LedgerError as e:
            raise CliError(f"--member {head}: {e}") from None
        peer_id = head
    else:
        key = load_key(head)
        pk, peer_id = key.public_key, key.peer_id
    try:
        return Member(peer_id=peer_id, public_key=pk, name=name, addrs=tuple(addrs))
    except ValueError as e:
        raise CliError(f"--member {spec!r}: {e}") from None


def _parse_param(text: str) -> tuple[str, Any]:
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise CliError(f"--param {text!r}: expected KEY=VALUE")
    for conv in (int, float):
        try:
            return k, conv(v)
        except ValueError:
            pass
    if v in ("true", "false"):
        return k, v == "true"
    return k, v


def cmd_genesis_create(args: argparse.Namespace) -> int:
    if not args.member:
        raise CliError("genesis create needs at least one --member")
    members = [_parse_member(s) for s in args.member]
    seen: dict[str, str] = {}
    for spec, m in zip(args.member, members):
        if m.peer_id in seen:
            raise CliError(f"duplicate member {m.peer_id} (--member {seen[m.peer_id]!r} and --member {spec!r})")
        seen[m.peer_id] = spec
    try:
        digest = bytes.fromhex(args.model_digest) if args.model_digest else sha256(b"concilium/unspecified-initial-model")
    except ValueError:
        raise CliError(f"--model-digest {args.model_digest!r}: not hex") from None
    try:
        genesis = Genesis(
            chain_id=args.chain_id,
            genesis_time_ms=args.time_ms if args.time_ms is not None else int(time.time() * 1000),
            members=tuple(sorted(members, key=lambda m: m.peer_id)),
            protocol=ProtocolParams(
                mode=args.mode,
                algorithm=args.algorithm,
                committee_size=args.committee_size or min(4, len(members)),
                quorum=args.quorum,
                fl_rounds=args.fl_rounds,
                params=dict(_parse_param(p) for p in args.param),
            ),
            model=ModelSpec(name=args.model, digest=digest),
        )
    except (ValueError, TypeError) as e:
        raise CliError(f"genesis: {e}") from None
    _write_atomic(Path(args.out), dump_genesis(genesis), overwrite=args.force)
    print(f"{args.out}: chain {genesis.chain_id}, {len(members)} members, genesis hash {genesis.hash().hex()}")
    return EXIT_OK


def cmd_genesis_show(args: argparse.Namespace) -> int:
    g = load_genesis(args.genesis)
    print(json.dumps({"genesis_hash": g.hash().hex(), **record_to_toml(g)}, indent=2))
    return EXIT_OK


# --- ledger ----------------------------------------------------------------------------------


def _open_ro(path: str) -> tuple[Any, Any]:
    return open_ledger(path, readonly=True)


def cmd_ledger_verify(args: argparse.Namespace) -> int:
    store, blobs = open_ledger(args.path, readonly=True, check_index=False)
    with store:
        genesis = store.genesis()
        if args.genesis:
            trusted = load_genesis(args.genesis)
            if trusted.hash() != genesis.hash():
                print(f"FAIL at height 0: the ledger's genesis differs from {args.genesis}")
                return EXIT_INVALID
        from tqdm import tqdm

        from node.reexec import reexecutor_for

        rx = None if args.reexec == "no" or args.no_blobs else reexecutor_for(genesis)
        if rx is None and args.reexec != "no" and not args.no_blobs:
            # a strategy that scores models on a public split (Sself): rebuild it from the results folder's
            # scenario.toml, if this ledger is a simulation's
            from sim import public_eval_for_ledger

            public = public_eval_for_ledger(Path(args.path))
            if public is not None:
                rx = reexecutor_for(genesis, public=public)
        if args.reexec == "yes" and rx is None:
            raise CliError(
                f"{args.path}: cannot re-execute algorithm {genesis.protocol.algorithm!r}"
                + (" without blobs" if args.no_blobs else "")
            )
        # progress on stderr, only when it is a terminal (disable=None), so scripts see one line
        with tqdm(total=store.height(), desc="verify", unit="block", file=sys.stderr, disable=None, leave=False) as bar:
            report = audit_chain(
                genesis,
                store.iter_rows(),
                blobs=None if args.no_blobs else blobs,
                expect_height=args.expect_height,
                reexecutor=rx,
                on_block=lambda _h: bar.update(1),
            )
    note = ""
    if report.ok and rx is None and args.reexec == "auto":
        note = f" (rounds not re-executed: algorithm {genesis.protocol.algorithm!r} has no re-executor)"
    print(report.line() + note)
    return EXIT_OK if report.ok else EXIT_INVALID


def _block_summary(block: Any) -> dict[str, Any]:
    hd, pl = block.header, block.payload
    return {
        "height": hd.height,
        "hash": hd.hash().hex(),
        "prev_hash": hd.prev_hash.hex(),
        "fl_round": hd.fl_round,
        "view": hd.view,
        "proposer": hd.proposer,
        "time_ms": hd.time_ms,
        "updates": [{"peer": u.peer, "digest": u.digest.hex(), "n_samples": u.n_samples} for u in pl.updates],
        "model_digest": pl.model_digest.hex(),
        "next_committee": list(pl.next_committee),
        "certified_by": [s.signer for s in block.certificate.signatures],
        "evidence": [{"kind": e.kind, "offender": e.offender, "reason": e.reason} for e in pl.evidence],
        "record": to_json_value(pl.record),
    }


def cmd_ledger_show(args: argparse.Namespace) -> int:
    store, _ = _open_ro(args.path)
    with store:
        g = store.genesis()
        if args.height is None:
            print(f"chain {g.chain_id}  genesis {g.hash().hex()}  height {store.height()}  head {store.head_hash().hex()}")
            print(f"mode {g.protocol.mode}  algorithm {g.protocol.algorithm}  members {len(g.members)}  "
                  f"committee {g.protocol.committee_size}  quorum {g.protocol.quorum}")
            for h, raw in store.iter_raw():
                b = _decode_block(raw, h)
                print(f"  {h:>6}  {b.hash().hex()[:16]}  view {b.header.view}  {len(b.payload.updates):>3} updates  "
                      f"model {b.payload.model_digest.hex()[:12]}  proposer {b.header.proposer[-8:]}")
            return EXIT_OK
        if not 0 <= args.height <= store.height():
            raise CliError(f"{args.path}: no block at height {args.height} (height is {store.height()})")
        if args.height == 0:
            print(json.dumps({"genesis_hash": g.hash().hex(), **record_to_toml(g)}, indent=2))
        else:
            print(json.dumps(_block_summary(_decode_block(store.get_raw(args.height), args.height)), indent=2))
    return EXIT_OK


def _decode_block(raw: bytes, height: int) -> Any:
    from ledger import Block

    try:
        return Block.decode(raw)  # type: ignore[attr-defined]
    except LedgerError as e:
        raise LedgerError(f"height {height}: {e}") from None


def cmd_ledger_export(args: argparse.Namespace) -> int:
    store, _ = _open_ro(args.path)
    with store:
        g = store.genesis()
        out = {
            "format": "concilium-ledger-export/1",
            "note": "bytes are hex; this is a view, the canonical bytes are in the ledger",
            "genesis_hash": g.hash().hex(),
            "genesis": to_json_value(g.to_value()),  # type: ignore[attr-defined]
            "blocks": [
                {"hash": _decode_block(raw, h).hash().hex(), **to_json_value(decode(raw))} for h, raw in store.iter_raw()
            ],
        }
    _emit(json.dumps(out, indent=1, sort_keys=True), args.out, f"{len(out['blocks'])} blocks")
    return EXIT_OK


def cmd_ledger_proof(args: argparse.Namespace) -> int:
    store, _ = _open_ro(args.path)
    with store:
        g = store.genesis()
        if not 1 <= args.height <= store.height():
            raise CliError(f"{args.path}: no block at height {args.height} (height is {store.height()})")
        block = _decode_block(store.get_raw(args.height), args.height)
        prev = _decode_block(store.get_raw(args.height - 1), args.height - 1) if args.height > 1 else None
        proof = make_proof(g, block, prev, args.peer)
    verify_proof(g, proof)  # never hand out a proof that does not verify
    doc = {
        "format": "concilium-inclusion-proof/1",
        "summary": {
            "chain_id": proof.chain_id,
            "height": proof.header.height,
            "block_hash": proof.header.hash().hex(),
            "peer": proof.commitment.peer,
            "update_digest": proof.commitment.digest.hex(),
            "n_samples": proof.commitment.n_samples,
            "leaf": proof.index,
            "leaves": proof.tree_size,
        },
        "proof": proof.encode().hex(),  # type: ignore[attr-defined]
    }
    _emit(json.dumps(doc, indent=1), args.out, f"proof of {args.peer}'s update at height {args.height}")
    return EXIT_OK


def cmd_ledger_verify_proof(args: argparse.Namespace) -> int:
    genesis = load_genesis(args.genesis)
    p = Path(args.proof)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"{p}: no such proof file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CliError(f"{p}: not a JSON proof file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "concilium-inclusion-proof/1" or not isinstance(doc.get("proof"), str):
        raise CliError(f"{p}: not a concilium inclusion proof")
    try:
        proof = InclusionProof.decode(bytes.fromhex(doc["proof"]))  # type: ignore[attr-defined]
    except ValueError:
        raise CliError(f"{p}: proof is not hex") from None
    except LedgerError as e:
        print(f"FAIL: {p}: malformed proof: {e}")
        return EXIT_INVALID
    try:
        print(verify_proof(genesis, proof))
    except LedgerError as e:
        print(f"FAIL: {e}")
        return EXIT_INVALID
    return EXIT_OK


def cmd_ledger_demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from sim import LedgerDemo

    out = Path(args.out)
    ledger_dir = out / "ledger"
    if ledger_dir.exists():
        raise CliError(f"{ledger_dir}: already exists (choose another --out or remove it)")
    demo = LedgerDemo(
        members=args.members,
        committee_size=args.committee_size,
        updates_per_block=args.updates,
        seed=args.seed,
    )
    store, blobs = create_ledger(ledger_dir, demo.genesis)
    t0 = time.perf_counter()
    with store, tqdm(total=args.blocks, desc="ledger demo", unit="block", file=sys.stderr) as bar:
        for _ in range(args.blocks):
            block, bl = demo.next_block()
            for data in bl.values():
                blobs.put(data)
            store.append(block)
            bar.set_postfix_str(f"height {block.height} committee {','.join(p[-4:] for p in block.payload.next_committee)}")
            bar.update(1)
    built = time.perf_counter() - t0
    (out / "genesis.toml").write_text(dump_genesis(demo.genesis), encoding="utf-8")
    store, blobs = open_ledger(ledger_dir, readonly=True, check_index=False)
    t1 = time.perf_counter()
    with store:
        report = audit_chain(store.genesis(), store.iter_rows(), blobs=blobs)
    checked = time.perf_counter() - t1
    summary = {
        "chain_id": report.chain_id,
        "blocks": report.height,
        "head_hash": report.head_hash.hex(),
        "verified": report.ok,
        "signatures_checked": report.signatures_checked,
        "build_seconds": round(built, 3),
        "verify_seconds": round(checked, 3),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(report.line())
    print(f"results in {out}/ (ledger/, genesis.toml, summary.json); audit again with: concilium ledger verify {ledger_dir}")
    return EXIT_OK if report.ok else EXIT_INVALID


def cmd_sim_run(args: argparse.Namespace) -> int:
    from sim import default_scenario_path, run_scenario

    scenario = Path(args.scenario) if args.scenario else default_scenario_path()
    name = scenario.stem
    out = Path(args.out) if args.out else Path("results") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    from consensus import ConsensusError
    from learning._errors import LearningError
    from sim import LivenessError

    try:
        summary = run_scenario(
            scenario, out=out, seed=args.seed, rounds=args.rounds, progress=not args.quiet, workers=args.workers
        )
    except FileExistsError as e:
        raise CliError(str(e)) from None
    except (LearningError, ConsensusError) as e:
        raise CliError(f"{scenario}: {e}") from None
    except LivenessError as e:
        print(f"FAIL: {e}")
        return EXIT_INVALID
    print(
        f"{summary['scenario']}: {summary['rounds']} rounds, final accuracy {summary['final_accuracy']:.4f}, "
        f"head {summary['head_hash'][:16]}, Byzantine updates accepted {summary['byzantine_accepted_total']}, "
        f"view changes {summary['view_changes']}, {summary['wall_seconds']:.1f} s"
    )
    print(f"ledger: {summary['ledger_verdict']}")
    print(f"results in {out}/ (ledger/, metrics.csv, summary.json, accuracy.png, acceptance.png)")
    return EXIT_OK if summary["ledger_verified"] else EXIT_INVALID


# --- parser ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="concilium", description="Decentralized, Byzantine-robust federated learning.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    k = sub.add_parser("keygen", help="create an Ed25519 node key (prints the peer id)")
    k.add_argument("--out", required=True, help="key file to write (mode 0600; libp2p format)")
    k.add_argument("--force", action="store_true", help="overwrite an existing key file")
    k.set_defaults(func=cmd_keygen)

    g = sub.add_parser("genesis", help="create or inspect a genesis file").add_subparsers(dest="sub", required=True)
    gc = g.add_parser("create", help="write a genesis TOML file")
    gc.add_argument("--member", action="append", default=[], metavar="KEYFILE|PEERID[,name=N][,addr=A]",
                    help="a member: its key file or its 12D3KooW... peer id (repeat for each member)")
    gc.add_argument("--out", required=True, help="genesis file to write")
    gc.add_argument("--chain-id", default="concilium")
    gc.add_argument("--mode", choices=MODES, default=COMMITTEE_MODE)
    gc.add_argument("--algorithm", default="cmfl")
    gc.add_argument("--committee-size", type=int, default=0, help="default: min(4, members)")
    gc.add_argument("--quorum", choices=QUORUM_RULES, default="bft",
                    help="bft = more than 2/3 (safe); majority = CMFL paper's floor(C/2)+1 (NOT Byzantine-safe)")
    gc.add_argument("--fl-rounds", type=int, default=0, help="rounds to run (0 = until stopped)")
    gc.add_argument("--model", default="mlp", help="model registry name")
    gc.add_argument("--model-digest", default="", help="hex SHA-256 of the initial model blob")
    gc.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="algorithm parameter")
    gc.add_argument("--time-ms", type=int, default=None, help="genesis time (default: now)")
    gc.add_argument("--force", action="store_true", help="overwrite an existing file")
    gc.set_defaults(func=cmd_genesis_create)
    gs = g.add_parser("show", help="validate a genesis file and print it with its hash")
    gs.add_argument("genesis")
    gs.set_defaults(func=cmd_genesis_show)

    lg = sub.add_parser("ledger", help="audit and inspect a ledger").add_subparsers(dest="sub", required=True)
    v = lg.add_parser("verify", help="verify a ledger offline (hash chain, signatures, certificates, Merkle roots, blobs)")
    v.add_argument("path", help="ledger directory (or its chain.sqlite)")
    v.add_argument("--genesis", help="trusted genesis file to compare the ledger's genesis with")
    v.add_argument("--no-blobs", action="store_true", help="skip checking referenced blobs")
    v.add_argument("--expect-height", type=int, help="fail if the chain is shorter (detects a truncated tail)")
    v.add_argument("--reexec", choices=("auto", "yes", "no"), default="auto",
                   help="re-execute every round (scores, selection, election, aggregation) from the blobs; "
                        "auto = when the genesis algorithm is known (default)")
    v.set_defaults(func=cmd_ledger_verify)
    s = lg.add_parser("show", help="list blocks, or print one block (0 = genesis)")
    s.add_argument("path")
    s.add_argument("height", nargs="?", type=int)
    s.set_defaults(func=cmd_ledger_show)
    e = lg.add_parser("export", help="export every block as JSON")
    e.add_argument("path")
    e.add_argument("--json", action="store_true", required=True, help="JSON output (the only format)")
    e.add_argument("--out", help="file to write (default: stdout)")
    e.set_defaults(func=cmd_ledger_export)
    p = lg.add_parser("proof", help="inclusion proof of PEER's update at HEIGHT, verifiable offline")
    p.add_argument("path")
    p.add_argument("height", type=int)
    p.add_argument("peer")
    p.add_argument("--out", help="file to write (default: stdout)")
    p.set_defaults(func=cmd_ledger_proof)
    vp = lg.add_parser("verify-proof", help="check an inclusion proof against a genesis file")
    vp.add_argument("proof")
    vp.add_argument("--genesis", required=True)
    vp.set_defaults(func=cmd_ledger_verify_proof)
    d = lg.add_parser("demo", help="build a signed multi-member demo chain in OUT/ledger and verify it")
    d.add_argument("--out", default="results/ledger-demo")
    d.add_argument("--members", type=int, default=10)
    d.add_argument("--committee-size", type=int, default=4)
    d.add_argument("--updates", type=int, default=6, help="signed updates per block")
    d.add_argument("--blocks", type=int, default=200)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_ledger_demo)

    sm = sub.add_parser("sim", help="run local multi-node simulations").add_subparsers(dest="sub", required=True)
    sr = sm.add_parser("run", help="run a scenario (default: scenarios/quickstart.toml) and write a results folder")
    sr.add_argument("scenario", nargs="?", help="scenario TOML file")
    sr.add_argument("--seed", type=int, help="override the scenario's seed")
    sr.add_argument("--rounds", type=int, help="override the scenario's number of rounds")
    sr.add_argument("--out", help="results folder (default: results/<scenario>-<timestamp>)")
    sr.add_argument("--quiet", action="store_true", help="no progress bar")
    sr.add_argument("--workers", type=int, default=None,
                    help="forked processes that train beside the simulator (default: usable cores - 1, at most 3, "
                         "on Linux with CPU training; 0 = train in-process). The results do not depend on it.")
    sr.set_defaults(func=cmd_sim_run)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (CliError, NodeError, LedgerError) as e:
        print(f"concilium: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("concilium: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
