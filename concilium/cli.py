"""The ``concilium`` command line.

Departure from docs/design.md (its layout puts the CLI in ``node/``): the entry point lives in this thin top-level
package because it must dispatch both to ``node`` (keys, genesis, running a peer) and to ``sim`` (``concilium
sim run``), and the layering forbids ``node`` from importing ``sim``. Command logic stays in the
layers; this module only parses arguments, prints, and maps errors to exit codes:

* 0 success; 1 a verification found the ledger/proof invalid (``genesis risk``: the committee is over the risk
  budget); 2 bad input (missing or wrong file, bad argument, a genesis whose committee risk is over the budget
  without ``--accept-risk``). Errors are one line ``concilium: error: <file>: <problem>`` and nothing is written.
* 141 (128 + SIGPIPE) when the reader of stdout went away (``concilium ledger show L | head``): silent,
  as a Unix filter killed by SIGPIPE.
* 130 after Ctrl-C, 143 after SIGTERM (128 + the signal): a simulation stops cleanly between two events,
  its helpers stopped and every decided block written, with one line ``concilium: interrupted|terminated``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import stat
import sys
import time
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ledger import (
    COMMITTEE_MODE,
    MEMBERS_MAX,
    MODES,
    QUORUM_RULES,
    Genesis,
    InclusionProof,
    LedgerError,
    Member,
    ModelSpec,
    ProtocolParams,
    audit_chain,
    make_proof,
    public_key_from_peer_id,
    sha256,
    verify_proof,
)
from ledger.store import CorruptStoreError, create_ledger, open_ledger
from node import NodeError, Terminated
from node.config import INT_MAX, check_multiaddr, dump_genesis, load_genesis, write_file_atomic
from node.explorer import (
    CannotReexecute,
    audit_ledger,
    block_summary,
    export_document,
    genesis_document,
    proof_document,
)
from node.keys import generate_key, load_key, save_key

from concilium._data import add_parsers as add_data_parsers
from concilium._net import add_parsers as add_net_parsers
from concilium._repro import rerun_reproducible
from concilium._risk import (
    RiskOverBudget,
    add_risk_arguments,
    assess,
    assumptions_from,
    check_risk,
    epoch_of,
    risk_lines,
    simulation_line,
    unit_interval,
)

__all__ = ["main"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_TERMINATED = 0, 1, 2, 130, 141, 143
EXIT_NOT_REEXECUTED = 3
"""``ledger verify`` (and ``sim run``): a valid chain whose rounds could not be re-executed here (never an OK)."""
PROOF_BYTES_MAX = 1 << 20
"""An inclusion proof is a header, a commitment and log2(leaves) hashes: a few KiB."""


class CliError(Exception):
    """A one-line user-facing error (exit code 2)."""


def _write_atomic(path: str, text: str, *, overwrite: bool = True, replace_link: bool | None = None) -> None:
    """Every output file: ``node.config.write_file_atomic`` (temp file beside it, fsync, rename), which
    refuses a directory, a missing or non-directory parent, an existing file or link unless ``overwrite``."""
    write_file_atomic(path, text.encode("utf-8"), overwrite=overwrite, replace_link=replace_link)


def _emit(text: str, out: str | None, what: str) -> None:
    """Write ``text`` to ``out`` atomically (printing a one-line note), or print it."""
    if out is not None:
        _write_atomic(out, text + "\n", replace_link=False)  # no --force here: an existing file, not a link
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
    if not head:
        raise CliError(f"--member {spec!r}: no key file or peer id before the options")
    name, addrs = "", []
    for o in opts:
        k, sep, v = o.partition("=")
        if not sep or k not in ("name", "addr"):
            raise CliError(f"--member {spec!r}: options are name=... and addr=..., got {o!r}")
        if k == "name":
            name = v
        else:
            addrs.append(v)
    if head.startswith("12D3KooW") and not os.path.lexists(head):
        try:
            pk = public_key_from_peer_id(head)
        except LedgerError as e:
            raise CliError(f"--member {head}: {e}") from None
        peer_id = head
    else:
        key = load_key(head)
        pk, peer_id = key.public_key, key.peer_id
    for a in addrs:
        try:
            check_multiaddr(a, peer_id=peer_id)
        except ValueError as e:
            raise CliError(f"--member {head}: addr={e}") from None
    try:
        return Member(peer_id=peer_id, public_key=pk, name=name, addrs=tuple(addrs))
    except ValueError as e:
        raise CliError(f"--member {spec!r}: {e}") from None


def _parse_param(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``: an integer (64-bit), a finite float, true/false, or else the text."""
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise CliError(f"--param {text!r}: expected KEY=VALUE")
    try:
        n = int(v)
    except ValueError:
        pass
    else:
        if not -(2**63) <= n <= INT_MAX:
            raise CliError(f"--param {k}: integer out of the 64-bit range")
        return k, n
    try:
        x = float(v)
    except ValueError:
        pass
    else:
        if not math.isfinite(x):
            raise CliError(f"--param {k}: {v!r:.40} is not a finite number")
        return k, x
    if v in ("true", "false"):
        return k, v == "true"
    return k, v


def _check_algorithm(mode: str, algorithm: str) -> None:
    """The algorithm is one this mode runs: ``cmfl`` in committee mode, a registered strategy otherwise."""
    if mode == COMMITTEE_MODE:
        if algorithm != "cmfl":
            raise CliError(f"--algorithm {algorithm!r}: committee mode runs cmfl (coordinator mode runs the others)")
        return
    from learning import STRATEGIES  # imports torch: only for coordinator mode

    if algorithm not in STRATEGIES:
        raise CliError(f"--algorithm {algorithm!r}: unknown strategy; known: {', '.join(sorted(STRATEGIES))}")


def _parse_params(texts: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for t in texts:
        k, v = _parse_param(t)
        if k in params:
            raise CliError(f"--param {k}: given twice")
        params[k] = v
    return params


def cmd_genesis_create(args: argparse.Namespace) -> int:
    if not args.member:
        raise CliError("genesis create needs at least one --member")
    _check_algorithm(args.mode, args.algorithm)
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
                params=_parse_params(args.param),
            ),
            model=ModelSpec(name=args.model, digest=digest),
        )
    except (ValueError, TypeError) as e:
        raise CliError(f"genesis: {e}") from None
    p = genesis.protocol
    what = f"--committee-size {p.committee_size}" + ("" if args.committee_size else " (the default, min(4, members))")
    try:
        lines = check_risk(args, members=len(members), committee_size=p.committee_size, quorum=p.quorum, mode=p.mode,
                           params=p.params, planned_rounds=p.fl_rounds, what=what, redraw=p.redraw_ticks > 0)
    except ValueError as e:  # a bad protocol.params.committee_epoch
        raise CliError(f"--param {e}") from None
    _write_atomic(args.out, dump_genesis(genesis), overwrite=args.force)
    print(f"{args.out}: chain {genesis.chain_id}, {len(members)} members, genesis hash {genesis.hash().hex()}")
    print("\n".join(lines))
    return EXIT_OK


def cmd_genesis_risk(args: argparse.Namespace) -> int:
    """The committee risk of a genesis file, or of ``--members`` (and ``--committee-size``), and the smallest
    committees within the budget; exit 1 when the committee judged is over it."""
    shape = ("members", "committee_size", "mode", "quorum", "committee_epoch")
    if args.genesis is not None:
        given = [f"--{k.replace('_', '-')}" for k in shape if getattr(args, k) is not None]
        if given:
            raise CliError(f"{given[0]}: the genesis file fixes it (give a genesis file or --members, not both)")
        g = load_genesis(args.genesis)
        members, size, p = len(g.members), g.protocol.committee_size, g.protocol
        mode, quorum, params, planned = p.mode, p.quorum, dict(p.params), p.fl_rounds
        redraw = p.redraw_ticks > 0
    elif args.members is None:
        raise CliError("genesis risk needs a genesis file or --members")
    else:
        members, size = args.members, args.committee_size
        if size is not None and size > members:
            raise CliError(f"--committee-size {size}: larger than --members {members}")
        mode, quorum, planned = args.mode or "coordinator", args.quorum or "bft", 0
        if mode == COMMITTEE_MODE and args.committee_epoch is not None:
            raise CliError("--committee-epoch: applies to coordinator mode only (committee mode elects its committees)")
        params = {} if args.committee_epoch is None else {"committee_epoch": args.committee_epoch}
        redraw = True  # (a genesis re-draws by default)
    a = assumptions_from(args, planned_rounds=planned, redraw=redraw)
    try:
        epoch = epoch_of(params, mode)
        risk, rec = assess(members=members, committee_size=size, quorum=quorum, mode=mode, committee_epoch=epoch, a=a)
    except ValueError as e:
        raise CliError(f"genesis risk: {e}") from None
    print("\n".join(risk_lines(risk, rec, a, committee_epoch=epoch)))
    return EXIT_INVALID if risk is not None and risk.safety > a.budget else EXIT_OK


def cmd_genesis_show(args: argparse.Namespace) -> int:
    g = load_genesis(args.genesis)
    print(json.dumps(genesis_document(g), indent=2))
    return EXIT_OK


# --- ledger ----------------------------------------------------------------------------------


def _open_ro(path: str) -> tuple[Any, Any]:
    """A ledger opened for a view (show, export, proof): read-only, nothing created beside it, and the index
    checked on open. Once the file is identified as a concilium ledger, anything wrong inside it is a
    :class:`CorruptStoreError`: the commands print its ``FAIL`` verdict and exit 1, as ``verify`` does."""
    return open_ledger(path, readonly=True)


def _public_for(path: Path) -> Any:
    """The public split a results ledger's strategy scores models on (Sself), rebuilt from the results folder's
    scenario.toml, or None (imports ``sim``: only when an audit needs it)."""
    from sim import public_eval_for_ledger

    return public_eval_for_ledger(Path(path))


def cmd_ledger_verify(args: argparse.Namespace) -> int:
    if args.reexec == "yes" and args.no_blobs:
        raise CliError("--reexec yes re-executes every round from the blobs, which --no-blobs skips")
    from tqdm import tqdm

    bars: list[Any] = []

    def start(total: int) -> None:
        # progress on stderr, only when it is a terminal (disable=None), so scripts see one line
        bars.append(tqdm(total=total, desc="verify", unit="block", file=sys.stderr, disable=None, leave=False))

    try:
        outcome = audit_ledger(
            args.path,
            trusted_genesis=args.genesis,
            reexec=args.reexec,
            no_blobs=args.no_blobs,
            expect_height=args.expect_height,
            public_for=_public_for,
            on_start=start,
            on_block=lambda _h: bars[0].update(1),
            app=args.app,
        )
    except CannotReexecute as e:  # --reexec yes on an algorithm this concilium cannot re-execute
        raise CliError(str(e)) from None
    finally:
        for bar in bars:
            bar.close()
    print(outcome.line)
    if outcome.status == "not_reexecuted":
        return EXIT_NOT_REEXECUTED
    return EXIT_OK if outcome.ok else EXIT_INVALID


def cmd_ledger_show(args: argparse.Namespace) -> int:
    try:
        store, _ = _open_ro(args.path)
        with store:
            g = store.genesis()
            if args.height is None:
                lines = [
                    f"chain {g.chain_id}  genesis {g.hash().hex()}  height {store.height()}  head {store.head_hash().hex()}",
                    f"mode {g.protocol.mode}  algorithm {g.protocol.algorithm}  members {len(g.members)}  "
                    f"committee {g.protocol.committee_size}  quorum {g.protocol.quorum}",
                ]
                for h, _raw, b in store.iter_checked():  # every row checked before anything is printed
                    lines.append(
                        f"  {h:>6}  {b.hash().hex()[:16]}  view {b.header.view}  {len(b.payload.updates):>3} updates  "
                        f"model {b.payload.model_digest.hex()[:12]}  proposer {b.header.proposer[-8:]}"
                    )
                text = "\n".join(lines)
            elif not 0 <= args.height <= store.height():
                note = f"; {store.warning}" if store.warning else ""
                raise CliError(f"{args.path}: no block at height {args.height} (height is {store.height()}{note})")
            elif args.height == 0:
                text = json.dumps(genesis_document(g), indent=2)
            else:
                text = json.dumps(block_summary(store.get_checked(args.height)), indent=2)
            warning = store.warning
    except CorruptStoreError as e:
        print(e.verdict())
        return EXIT_INVALID
    if warning:
        print(f"concilium: warning: {warning}", file=sys.stderr)
    print(text)
    return EXIT_OK


def cmd_ledger_export(args: argparse.Namespace) -> int:
    try:
        store, _ = _open_ro(args.path)
        with store:
            out = export_document(store)
            warning = store.warning
    except CorruptStoreError as e:
        print(e.verdict())
        return EXIT_INVALID
    if warning:
        print(f"concilium: warning: {warning}", file=sys.stderr)
        out["warning"] = warning
    _emit(json.dumps(out, indent=1, sort_keys=True), args.out, f"{len(out['blocks'])} blocks")
    return EXIT_OK


def cmd_ledger_proof(args: argparse.Namespace) -> int:
    try:
        store, _ = _open_ro(args.path)
        with store:
            g = store.genesis()
            if not 1 <= args.height <= store.height():
                note = f"; {store.warning}" if store.warning else ""
                raise CliError(f"{args.path}: no block at height {args.height} (height is {store.height()}{note})")
            block = store.get_checked(args.height)
            prev = store.get_checked(args.height - 1) if args.height > 1 else None
            warning = store.warning
    except CorruptStoreError as e:
        print(e.verdict())
        return EXIT_INVALID
    proof = make_proof(g, block, prev, args.peer)  # no update of PEER there: bad input (exit 2)
    try:
        verify_proof(g, proof)  # never hand out a proof that does not verify
    except LedgerError as e:  # the stored block itself is invalid
        reason = str(e).removeprefix(f"height {args.height}: ")
        print(f"FAIL at height {args.height}: {reason} (no proof written)")
        return EXIT_INVALID
    if warning:
        print(f"concilium: warning: {warning}", file=sys.stderr)
    doc = proof_document(proof)
    _emit(json.dumps(doc, indent=1), args.out, f"proof of {args.peer}'s update at height {args.height}")
    return EXIT_OK


def cmd_ledger_verify_proof(args: argparse.Namespace) -> int:
    genesis = load_genesis(args.genesis)
    p = Path(args.proof)
    try:
        if not stat.S_ISREG(p.stat().st_mode):  # a FIFO or a device would never end
            raise CliError(f"{p}: not a regular file, expected a JSON proof file")
        with open(p, "rb") as f:
            raw = f.read(PROOF_BYTES_MAX + 1)
        if len(raw) > PROOF_BYTES_MAX:
            raise CliError(f"{p}: larger than {PROOF_BYTES_MAX} bytes, not a proof file")
        doc = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise CliError(f"{p}: no such proof file") from None
    except RecursionError:  # the json module recurses once per nesting level
        raise CliError(f"{p}: not a JSON proof file (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CliError(f"{p}: not a JSON proof file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "concilium-inclusion-proof/1" or not isinstance(doc.get("proof"), str):
        raise CliError(f"{p}: not a concilium inclusion proof")
    try:
        proof = InclusionProof.decode(bytes.fromhex(doc["proof"]))
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


def cmd_ledger_serve(args: argparse.Namespace) -> int:
    """The read-only web explorer over a ledger (``node.explorer``) until Ctrl-C or SIGTERM (exit 0)."""
    from node.explorer import bind, create_app, host_names, parse_listen, require_web

    try:
        require_web()
    except ImportError as e:
        raise CliError(str(e)) from None
    try:
        host, port = parse_listen(f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}")
    except ValueError as e:
        raise CliError(f"--host {args.host}: {e}") from None
    store, _ = _open_ro(args.path)  # a ledger that can be read, or one line and exit 2 (1 if it is corrupt)
    with store:
        params = store.genesis().protocol.params
    if args.genesis:
        load_genesis(args.genesis)  # a bad trusted genesis file: exit 2 now, not at the first audit
    if args.results is not None and not Path(args.results).is_dir():
        raise CliError(f"--results {args.results}: no such folder")
    if args.app is not None:  # the app the genesis pins: checked now (one line, exit 2), loaded for the audit
        from node.apps import load_pinned_app  # noqa: PLC0415

        load_pinned_app(params, args.app, what=f"{args.path}'s genesis")
    app = create_app(args.path, results=args.results, trusted_genesis=args.genesis, public_for=_public_for,
                     allowed_hosts=host_names(host), app=args.app)
    try:
        sock = bind(host, port)
    except OSError as e:
        raise CliError(f"--host/--port {host}:{port}: cannot listen ({e.strerror})") from None
    from node.explorer import serve_asyncio, url_of

    print(f"explorer of {args.path} (read-only) at {url_of(sock)}  (Ctrl-C stops)", flush=True)
    serve_asyncio(app, sock)
    return EXIT_OK


def cmd_ledger_demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ledger.testing import LedgerDemo
    from sim import results_folder

    # every bound before any key is derived or anything is written
    if args.committee_size > args.members:
        raise CliError(f"--committee-size {args.committee_size}: larger than --members {args.members}")
    if args.updates > args.members:
        raise CliError(f"--updates {args.updates}: larger than --members {args.members}")
    out = Path(args.out)
    ledger_dir = out / "ledger"
    with results_folder(args.out, force=args.force) as build:
        try:
            demo = LedgerDemo(
                members=args.members,
                committee_size=args.committee_size,
                updates_per_block=args.updates,
                seed=args.seed,
            )
        except ValueError as e:
            raise CliError(f"ledger demo: {e}") from None
        store, blobs = create_ledger(build / "ledger", demo.genesis)
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
        write_file_atomic(build / "genesis.toml", dump_genesis(demo.genesis).encode(), overwrite=False)
        store, blobs = open_ledger(build / "ledger", readonly=True, check_index=False)
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
        write_file_atomic(build / "summary.json", (json.dumps(summary, indent=2) + "\n").encode(), overwrite=False)
    # its rounds are synthetic (updates of no training), so no audit re-executes them: said, never an unqualified OK
    print(report.line() + (" (rounds not re-executed: a ledger demo's updates come from no training)" if report.ok else ""))
    print(f"results in {out}/ (ledger/, genesis.toml, summary.json); audit again with: concilium ledger verify "
          f"{ledger_dir} --reexec no")
    return EXIT_OK if report.ok else EXIT_INVALID


def cmd_sim_sweep(args: argparse.Namespace) -> int:
    from sim import parse_grid, parse_seeds, resolve_scenario, run_sweep

    scenario = resolve_scenario(args.scenario)
    grid = parse_grid(args.grid)
    seeds = parse_seeds(args.seeds)
    out = args.out if args.out is not None else Path("results") / f"sweep-{scenario.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    command = " ".join(["concilium", "sim", "sweep", str(scenario), *(f"--grid {g}" for g in args.grid), "--seeds",
                        args.seeds, *(["--rounds", str(args.rounds)] if args.rounds else [])])
    result = run_sweep(scenario, grid=grid, seeds=seeds, out=out, rounds=args.rounds, workers=args.workers,
                       progress=not args.quiet, command=command)
    rows = result["rows"]
    keys = [a.key for a in grid]
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["combo"], []).append(r["final_accuracy"])
    print(f"sweep of {scenario.name}: {len(rows)} runs, {len(by)} combinations x {len(seeds)} seeds ({', '.join(keys) or 'no grid'})")
    for combo, accs in by.items():
        finite = [a for a in accs if a == a]
        mean = sum(finite) / len(finite) if finite else float("nan")
        spread = f"{min(finite):.4f}-{max(finite):.4f}" if finite else "-"
        print(f"  {combo}: final accuracy mean {mean:.4f} (range {spread})")
    bad = [r for r in rows if r["ledger_status"] != "ok"]
    print(f"ledgers: {len(rows) - len(bad)} of {len(rows)} verified with re-execution"
          + (f"; not OK: {', '.join(r['folder'] for r in bad[:5])}" if bad else ""))
    print(f"results in {out}/ (sweep.csv, sweep.json, sweep.png, one results folder per run)")
    if result["status"] == "not_reexecuted":
        return EXIT_NOT_REEXECUTED
    return EXIT_OK if result["status"] == "ok" else EXIT_INVALID


def cmd_sim_run(args: argparse.Namespace) -> int:
    from sim import load_scenario, resolve_scenario, run_scenario

    scenario = resolve_scenario(args.scenario)  # a path or a bundled name; unknown: one line naming the bundled ones
    loaded = load_scenario(scenario, sets=args.set)
    rerun = rerun_reproducible(args, args.reproducible or loaded.training.reproducible)
    if rerun is not None:
        return rerun
    name = scenario.stem
    out = args.out if args.out is not None else Path("results") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    from consensus import ConsensusError
    from learning import LearningError
    from sim import LivenessError
    from sim import GPU_FRACTION_DEFAULT, RayClusterError, RayExecutor

    executor = None
    if args.executor == "ray":
        if args.workers is not None:
            raise CliError("--workers: applies to the local executor, not to --executor ray")
        executor = RayExecutor(address=args.ray_address, gpu_fraction=args.ray_gpu_fraction or GPU_FRACTION_DEFAULT)
    elif args.ray_address is not None or args.ray_gpu_fraction is not None:
        raise CliError("--ray-address, --ray-gpu-fraction: need --executor ray")

    def show(summary: dict[str, Any]) -> None:  # as soon as the summary is written; the plots may still be drawing
        print(
            f"{summary['scenario']}: {summary['rounds']} rounds, final accuracy {summary['final_accuracy']:.4f}, "
            f"head {summary['head_hash'][:16]}, Byzantine updates accepted {summary['byzantine_accepted_total']}, "
            f"view changes {summary['view_changes']}, {summary['wall_seconds']:.1f} s"
        )
        print(f"ledger: {summary['ledger_verdict']}")
        print(simulation_line(loaded, args.rounds or loaded.rounds))
        if executor is not None and executor.stats:
            st = executor.stats
            print(f"ray: {st['trainers']} trainers, {st['jobs']} jobs, {st['models']} models sent for {st['rounds']} rounds trained")
        print(f"results in {out}/ (ledger/, metrics.csv, summary.json, accuracy.png, acceptance.png)", flush=True)

    try:
        summary = run_scenario(
            scenario, out=out, seed=args.seed, rounds=args.rounds, progress=not args.quiet, workers=args.workers,
            force=args.force, executor=executor, on_summary=show, reproducible=args.reproducible, sets=args.set,
            device=args.device,
        )
    except FileExistsError as e:
        raise CliError(str(e)) from None
    except (LearningError, ConsensusError) as e:
        raise CliError(f"{scenario}: {e}") from None
    except RayClusterError as e:
        raise CliError(f"--executor ray: {e}") from None
    except LivenessError as e:
        print(f"FAIL: {e}")
        return EXIT_INVALID
    if summary["ledger_status"] == "not_reexecuted":
        return EXIT_NOT_REEXECUTED
    return EXIT_OK if summary["ledger_verified"] else EXIT_INVALID


# --- parser ----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with the house error format: one line ``concilium: error: <option>: <problem>``, exit 2,
    instead of argparse's usage block and error (``--help`` still prints the usage)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"concilium: error: {_one_line(message.removeprefix('argument '))}\n")


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a decimal integer in ``[lo, hi]`` (every integer flag is bounded: no 10**30 rounds)."""

    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:  # also a literal longer than Python converts
            raise argparse.ArgumentTypeError(f"not an integer: {text!r:.40}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {text:.40}")
        return v

    parse.__name__ = "integer"
    return parse


_fraction = unit_interval(open_low=True)
"""An argparse type: a number in (0, 1]."""


INT63_MAX = 2**63 - 1
ROUNDS_MAX = 1_000_000
"""= ``sim._scenario.ROUNDS_MAX`` (not imported: ``sim`` imports torch, and every command parses first)."""
WORKERS_MAX = 64


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="concilium", description="Decentralized, Byzantine-robust federated learning.")
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
    gc.add_argument("--committee-size", type=_int_in(0, MEMBERS_MAX), default=0, help="default: min(4, members)")
    gc.add_argument("--quorum", choices=QUORUM_RULES, default="bft",
                    help="bft = more than 2/3 (safe); majority = CMFL paper's floor(C/2)+1 (NOT Byzantine-safe)")
    gc.add_argument("--fl-rounds", type=_int_in(0, INT63_MAX), default=0, help="rounds to run (0 = until stopped)")
    gc.add_argument("--model", default="mlp", help="model registry name")
    gc.add_argument("--model-digest", default="", help="hex SHA-256 of the initial model blob")
    gc.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="algorithm parameter")
    gc.add_argument("--time-ms", type=_int_in(0, INT63_MAX), default=None, help="genesis time (default: now)")
    gc.add_argument("--force", action="store_true", help="overwrite an existing file")
    add_risk_arguments(gc, rounds_type=_int_in(1, INT63_MAX), refuses=True)
    gc.set_defaults(func=cmd_genesis_create)
    gr = g.add_parser("risk", help="the probability that a random committee holds a Byzantine quorum over a run, and "
                                   "the smallest committee within a budget",
                      description="Print the probability that a randomly drawn committee holds a Byzantine quorum "
                                  "(safety) or enough seats to block one (liveness), per draw and over the run, and "
                                  "the smallest committee sizes within the budget, for a genesis file or for "
                                  "--members. Exit 1 when the committee judged is over the budget.")
    gr.add_argument("genesis", nargs="?", help="genesis file (its members, committee size, mode, quorum rule, rounds)")
    gr.add_argument("--members", type=_int_in(1, MEMBERS_MAX), help="without a genesis file: the number of members")
    gr.add_argument("--committee-size", type=_int_in(1, MEMBERS_MAX), help="a committee size to judge (default: none)")
    gr.add_argument("--mode", choices=MODES, help="default coordinator (committee mode draws only the genesis committee)")
    gr.add_argument("--quorum", choices=QUORUM_RULES, help="default bft")
    gr.add_argument("--committee-epoch", type=_int_in(1, 1_000_000),
                    help="coordinator mode: heights one committee serves (default 1)")
    add_risk_arguments(gr, rounds_type=_int_in(1, INT63_MAX), refuses=False)
    gr.set_defaults(func=cmd_genesis_risk)
    gs = g.add_parser("show", help="validate a genesis file and print it with its hash")
    gs.add_argument("genesis")
    gs.set_defaults(func=cmd_genesis_show)

    lg = sub.add_parser("ledger", help="audit and inspect a ledger").add_subparsers(dest="sub", required=True)
    v = lg.add_parser("verify", help="verify a ledger offline (hash chain, signatures, certificates, Merkle roots, blobs)")
    v.add_argument("path", help="ledger directory (or its chain.sqlite)")
    v.add_argument("--genesis", help="trusted genesis file to compare the ledger's genesis with")
    v.add_argument("--no-blobs", action="store_true", help="skip checking referenced blobs")
    v.add_argument("--expect-height", type=_int_in(0, INT63_MAX),
                   help="fail if the chain is shorter (detects a truncated tail)")
    v.add_argument("--reexec", choices=("auto", "yes", "no"), default="auto",
                   help="re-execute every round (scores, selection, election, aggregation) from the blobs, and "
                        "recompute every committee score row from the updates it scored; "
                        "auto = when the genesis algorithm is known (default)")
    v.add_argument("--app", metavar="PATH",
                   help="the app (a .py file or a package directory) the genesis pins, for re-execution (default: "
                        "the one a results folder's scenario.toml names, else an installed one of the pinned name)")
    v.set_defaults(func=cmd_ledger_verify)
    s = lg.add_parser("show", help="list blocks, or print one block (0 = genesis)")
    s.add_argument("path")
    s.add_argument("height", nargs="?", type=_int_in(0, INT63_MAX))
    s.set_defaults(func=cmd_ledger_show)
    e = lg.add_parser("export", help="export every block as JSON")
    e.add_argument("path")
    e.add_argument("--json", action="store_true", required=True, help="JSON output (the only format)")
    e.add_argument("--out", help="file to write (default: stdout)")
    e.set_defaults(func=cmd_ledger_export)
    p = lg.add_parser("proof", help="inclusion proof of PEER's update at HEIGHT, verifiable offline")
    p.add_argument("path")
    p.add_argument("height", type=_int_in(0, INT63_MAX))
    p.add_argument("peer")
    p.add_argument("--out", help="file to write (default: stdout)")
    p.set_defaults(func=cmd_ledger_proof)
    vp = lg.add_parser("verify-proof", help="check an inclusion proof against a genesis file")
    vp.add_argument("proof")
    vp.add_argument("--genesis", required=True)
    vp.set_defaults(func=cmd_ledger_verify_proof)
    sv = lg.add_parser("serve", help="serve a read-only web explorer of a ledger (blocks, members, proofs, audit)",
                       description="Serve a read-only web explorer of a ledger: overview, blocks, one block, one "
                                   "member, inclusion proofs, the audit (the checks of ledger verify) and a JSON "
                                   "API under /api/. Needs pip install 'concilium[web]'.")
    sv.add_argument("path", help="ledger directory (or its chain.sqlite)")
    sv.add_argument("--genesis", help="trusted genesis file the audit compares the ledger's genesis with")
    sv.add_argument("--results", help="results folder with metrics.csv for the accuracy plot "
                                      "(default: the folder the ledger is in, if it has one)")
    sv.add_argument("--host", default="127.0.0.1",
                    help="IP address to listen on (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=_int_in(0, 65535), default=8080, help="TCP port (default 8080; 0 = any free port)")
    sv.add_argument("--app", metavar="PATH", help="the app the genesis pins, for the audit's re-execution (as for verify)")
    sv.set_defaults(func=cmd_ledger_serve)
    d = lg.add_parser("demo", help="build a signed multi-member demo chain in OUT/ledger and verify it")
    d.add_argument("--out", default="results/ledger-demo", help="results folder (new or empty; see --force)")
    d.add_argument("--force", action="store_true",
                   help="replace an earlier results folder at --out, once the new one is complete")
    d.add_argument("--members", type=_int_in(1, MEMBERS_MAX), default=10)
    d.add_argument("--committee-size", type=_int_in(1, MEMBERS_MAX), default=4, help="at most --members")
    d.add_argument("--updates", type=_int_in(0, MEMBERS_MAX), default=6, help="signed updates per block (at most --members)")
    d.add_argument("--blocks", type=_int_in(0, 1_000_000), default=200)
    d.add_argument("--seed", type=_int_in(0, INT_MAX), default=0)
    d.set_defaults(func=cmd_ledger_demo)

    sm = sub.add_parser("sim", help="run local multi-node simulations").add_subparsers(dest="sub", required=True)
    sr = sm.add_parser("run", help="run a scenario (default: the bundled quickstart) and write a results folder",
                       description="Run a scenario and write a results folder. SCENARIO is a TOML file or the name "
                                   "of a scenario bundled with concilium (quickstart, coordinator_fedavg, "
                                   "coordinator_corrupt, committee_crash, seed00X_..., full/...; an unknown name "
                                   "lists them all).")
    sr.add_argument("scenario", nargs="?", metavar="SCENARIO",
                    help="scenario TOML file or bundled scenario name, e.g. quickstart (the default)")
    sr.add_argument("--seed", type=_int_in(0, INT_MAX), help="override the scenario's seed")
    sr.add_argument("--rounds", type=_int_in(1, ROUNDS_MAX), help="override the scenario's number of rounds")
    sr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a scenario key, dotted (training.lr=0.01, protocol.params.clients=8; a TOML value "
                         "or a bare word), validated like the file; repeatable")
    sr.add_argument("--device", metavar="auto|cpu|cuda|cuda:N|mps",
                    help="train on this device instead of the scenario's training.device (auto: CUDA where present, "
                         "else MPS, else the CPU); checked at start. The results do not depend on it beyond bits")
    sr.add_argument("--out", help="results folder, new or empty (default: results/<scenario>-<timestamp>)")
    sr.add_argument("--force", action="store_true",
                    help="replace an earlier results folder at --out, once the new run is complete")
    sr.add_argument("--quiet", action="store_true", help="no progress bar")
    sr.add_argument("--workers", type=_int_in(0, WORKERS_MAX), default=None,
                    help="forked processes that train beside the simulator (default: usable cores - 1, at most 3, "
                         "on Linux with CPU training; 0 = train in-process). The results do not depend on it.")
    sr.add_argument("--reproducible", action="store_true",
                    help="reproducible mode: the same ledger head on any x86-64 CPU (portable kernels, one thread per "
                         "process; slower). Also the scenario key training.reproducible = true")
    sr.add_argument("--executor", choices=("local", "ray"), default="local",
                    help="where local training jobs run: forked workers on this machine (local, the default) or a "
                         "Ray cluster (ray; needs pip install 'concilium[ray]'). The results do not depend on it.")
    sr.add_argument("--ray-address", metavar="ADDR",
                    help="the Ray cluster to join, e.g. HEAD:6379 (default: RAY_ADDRESS, else a Ray instance "
                         "started on this machine)")
    sr.add_argument("--ray-gpu-fraction", type=_fraction, default=None, metavar="F",
                    help="share of a GPU each Ray trainer asks for when the scenario trains on CUDA "
                         "(default 0.25: four trainers per GPU)")
    sr.set_defaults(func=cmd_sim_run)
    sw = sm.add_parser("sweep", help="run a scenario over a grid of --set values and seeds; a table and a plot",
                       description="Run SCENARIO once per combination of the --grid values and per seed, each into "
                                   "its own results folder under --out, then write sweep.csv, sweep.json and "
                                   "sweep.png. Exit 0 only if every run's ledger verifies with re-execution.")
    sw.add_argument("scenario", metavar="SCENARIO", help="scenario TOML file or bundled scenario name")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="a dotted scenario key and the values to try (as --set values; repeatable: the product)")
    sw.add_argument("--seeds", default="0", help="seeds, e.g. 0-4 or 1,3,7 (default 0)")
    sw.add_argument("--rounds", type=_int_in(1, ROUNDS_MAX), help="override the scenario's number of rounds")
    sw.add_argument("--out", help="sweep folder, new or empty (default: results/sweep-<scenario>-<timestamp>)")
    sw.add_argument("--workers", type=_int_in(0, WORKERS_MAX), default=None, help="as for sim run")
    sw.add_argument("--quiet", action="store_true", help="no line per run")
    sw.set_defaults(func=cmd_sim_sweep)
    add_net_parsers(sub, _int_in, ROUNDS_MAX)
    add_data_parsers(sub, _int_in)
    return ap


def _one_line(text: str) -> str:
    """``text`` with control characters escaped (a file name may hold a newline): one line, always."""
    return text.translate(_CONTROL)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127)} | {10: "\\n", 13: "\\r", 9: "\\t"}


def _fail(message: str) -> int:
    print(f"concilium: error: {_one_line(message)}", file=sys.stderr)
    return EXIT_USAGE


def _stdout_gone() -> int:
    """The reader of stdout went away (``| head``): exit quietly as a Unix filter does on SIGPIPE. Point fd 1
    at /dev/null so the interpreter's last flush does not fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # not a real file descriptor (a test's captured stdout)
    return EXIT_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error, already printed as one line (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    # how to run this command again (concilium._repro: reproducible mode starts a process in its environment)
    args.argv_, args.console_ = list(sys.argv[1:] if argv is None else argv), argv is None
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # here, so that a closed pipe is seen now and not at interpreter exit
        if argv is None:  # the console script: the process ends now
            import gc  # noqa: PLC0415

            # the interpreter's exit would run the cycle collector over every object a run left (about 0.5-1.5 s
            # after a W1 simulation); freed by the exit anyway, so it is not looked at
            gc.freeze()
        return code
    except BrokenPipeError:
        return _stdout_gone()
    except (CliError, NodeError, LedgerError, RiskOverBudget) as e:
        return _fail(str(e))
    except RecursionError:
        return _fail("input nested too deeply")
    except MemoryError:
        return _fail("out of memory (the input asks for more than this machine has)")
    except Terminated:
        print("concilium: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("concilium: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
