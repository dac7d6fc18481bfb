"""Run a scenario end to end and write its results folder (the main job behind ``concilium sim run``).

``RESULTS/``
    ``ledger/``          the committed chain (SQLite + blobs), verifiable offline
    ``genesis.toml``     the simulated network's genesis
    ``scenario.toml``    a copy of the scenario that ran (with the seed and rounds used)
    ``metrics.csv``      one row per round
    ``summary.json``     final figures, traffic, verification verdict, how to reproduce
    ``accuracy.png``     test accuracy per round
    ``acceptance.png``   how often each client's update was accepted (Byzantine clients in red; a histogram
                         of the rates above ``ACCEPTANCE_BARS_MAX`` clients)

A run that fails on its input leaves nothing behind (:func:`results_folder`); ``force`` replaces an earlier
results folder only once the new one is complete. The plots are drawn in a forked child while this process
audits the ledger and writes the rest (matplotlib is never imported here), and the summary is reported
before waiting for them; they are in the folder when :func:`run_scenario` returns.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import multiprocessing
import os
import secrets
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from ledger import AuditReport, Caches, LedgerError, audit_chain
from ledger.store import open_ledger
from node import ConfigFileError, NodeError, OutputPathError
from node.config import dump_genesis, output_path
from learning import LearningError, PublicEval, parse_data_attack
from node.apps import app_beside, load_pinned_app, pin_of
from node.reexec import ledger_reexecutor
from sim._engine import LivenessError, RoundMetrics, Simulation, SimResult
from sim._scenario import MEMORY_BYTES_MAX, Scenario, load_scenario
from node.world import resolve_device

__all__ = [
    "has_backdoor",
    "metric_columns",
    "public_eval_for_ledger",
    "results_folder",
    "run_scenario",
    "scenario_toml",
    "verify_ledger",
    "write_results",
]


ACCEPTANCE_BARS_MAX = 60
"""Above this many clients that trained, ``acceptance.png`` shows the distribution of acceptance rates."""


def accuracy_plot(path: Path, points: list[tuple[int, float]], title: str) -> None:
    """Test accuracy per round (NaN rounds left out) as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [(x, y) for x, y in points if not math.isnan(y)]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=110)
    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plots(out: Path, res: SimResult) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    accuracy_plot(out / "accuracy.png", [(m.fl_round, m.accuracy) for m in res.rounds],
                  f"{res.scenario.name} (seed {res.scenario.seed}, {res.scenario.protocol.mode} mode)")

    peers = sorted(res.acceptance, key=lambda p: res.member_index[p])
    rates = [res.acceptance[p][0] / res.acceptance[p][1] if res.acceptance[p][1] else 0.0 for p in peers]
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=110)
    if len(peers) > ACCEPTANCE_BARS_MAX:  # members that never trained have no rate: left out here
        # one bar per client is unreadable (and slow to draw: minutes at 10,000 members): the distribution instead
        trained = [(p, r) for p, r in zip(peers, rates) if res.acceptance[p][1]]
        honest = [r for p, r in trained if p not in res.byzantine]
        byz = [r for p, r in trained if p in res.byzantine]
        bins = [i / 20 for i in range(21)]
        ax.hist([honest, byz], bins=bins, color=["tab:blue", "tab:red"], label=["honest", "Byzantine"])
        ax.set_xlabel("accepted / trained")
        ax.set_ylabel("clients")
        ax.set_title(f"acceptance of the {len(trained):,} clients that trained (red: Byzantine)")
        ax.legend()
    else:
        colors = ["tab:red" if p in res.byzantine else "tab:blue" for p in peers]
        ax.bar([f"n{res.member_index[p]}" for p in peers], rates, color=colors)
        ax.set_ylabel("accepted / trained")
        ax.set_ylim(0, 1)
        ax.set_title("per-client acceptance (red: Byzantine)")
        ax.tick_params(axis="x", labelrotation=90, labelsize=7)
        for label, p in zip(ax.get_xticklabels(), peers):
            if p in res.byzantine:
                label.set_color("tab:red")  # a bar of height 0 is invisible: mark the name too
    fig.tight_layout()
    fig.savefig(out / "acceptance.png")
    plt.close(fig)


def _plot_child(out: Path, res: SimResult, parent: int) -> None:
    import signal  # noqa: PLC0415

    from sim._workers import guard_parent  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops this child itself
    if guard_parent(parent, signal.SIGKILL):  # no helper outlives the run's process (sim/_workers.py)
        _plots(out, res)


class _Plotter:
    """The plots of a run, drawn in a forked child (Linux, a process that may have children) while the caller
    goes on; :meth:`wait` returns once they are written (drawn here if the child could not)."""

    def __init__(self, out: Path, res: SimResult) -> None:
        self.out, self.res = out, res
        self._proc: Any = None
        if sys.platform.startswith("linux") and not multiprocessing.current_process().daemon:
            for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    stream.flush()
            try:
                proc = multiprocessing.get_context("fork").Process(
                    target=_plot_child, args=(out, res, os.getpid()), daemon=True, name="concilium-plots")
                proc.start()
                self._proc = proc
            except OSError:  # no process to spare: drawn here at wait()
                self._proc = None

    def wait(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.join()
            if proc.exitcode == 0:
                return
        _plots(self.out, self.res)  # no child, or it failed: here (its error, if it is one, raised here)

    def stop(self) -> None:
        """Abandon the plots (the run failed or was interrupted)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.join()


def has_backdoor(scenario: Scenario) -> bool:
    """Does the scenario run a per-batch backdoor (so its rounds carry an attack success rate)?"""
    spec = scenario.adversary.data_attack
    return bool(spec) and bool(getattr(parse_data_attack(spec), "per_batch", False))


def metric_columns(scenario: Scenario) -> list[str]:
    """The ``metrics.csv`` columns: every :class:`RoundMetrics` field, ``asr`` only with a backdoor."""
    names = [fld.name for fld in dataclasses.fields(RoundMetrics)]
    return names if has_backdoor(scenario) else [n for n in names if n != "asr"]


def write_results(
    out: Path,
    scenario: Scenario,
    res: SimResult,
    verdict: str,
    verified: bool,
    *,
    shown_as: Path | None = None,
    plots: bool = True,
    findings: Sequence[Mapping[str, Any]] = (),
    chain_valid: bool | None = None,
    status: str | None = None,
    partial: bool = False,
) -> dict[str, Any]:
    """Write ``metrics.csv``, ``summary.json``, plots, genesis and scenario copies; return the summary.
    ``shown_as``: where the folder will be once published (the paths the summary prints), if not ``out``;
    ``plots=False`` leaves out ``accuracy.png`` and ``acceptance.png`` (a sweep of many runs plots its own).
    ``findings``: the audit's findings (``ledger.AuditFinding``: lying score rows), each with its member (``nI``)
    and whether a fault of the scenario controls that member (``scenario_fault``); ``chain_valid``: every other
    check of the audit passed (default: ``verified``). The summary's ``ledger_valid_but_for_faulty_members`` is
    true when the ledger verifies, or fails only by score rows of members the scenario itself makes lie (its
    ``corrupt`` faults): what such a scenario should give. ``status``: the audit's (:func:`ledger_verdict`; default
    ``"ok"`` if ``verified`` else ``"fail"``), ``ledger_status`` in the summary. ``partial``: the run was stopped
    (Ctrl-C, SIGTERM) after ``len(res.rounds)`` of the scenario's rounds (``"partial": true`` in the summary)."""
    columns = metric_columns(scenario)
    with open(out / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for m in res.rounds:
            w.writerow([getattr(m, c) for c in columns])
    (out / "genesis.toml").write_text(dump_genesis(res.genesis), encoding="utf-8")
    write_scenario(scenario, out)
    if plots:
        _plots(out, res)
    summary = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "mode": scenario.protocol.mode,
        "algorithm": scenario.protocol.algorithm,
        "rounds": len(res.rounds),
        "partial": partial,
        "final_accuracy": res.final_accuracy,
        **({"final_asr": res.final_asr} if "asr" in columns else {}),
        "head_hash": res.head_hash.hex(),
        "byzantine_clients": [f"n{res.member_index[p]}" for p in res.byzantine],
        "byzantine_accepted_total": sum(m.byzantine_accepted for m in res.rounds),
        "view_changes": res.view_changes,
        "evidence_in_ledger": res.evidence,
        "bytes_by_kind": res.bytes_by_kind,
        "messages_by_kind": res.messages_by_kind,
        "dropped_messages": res.dropped_messages,
        "virtual_seconds": res.rounds[-1].virtual_time_s if res.rounds else 0.0,
        "wall_seconds": round(res.wall_seconds, 3),
        "ledger_verified": verified,
        "ledger_status": status if status is not None else ("ok" if verified else "fail"),
        "ledger_verdict": verdict,
        "ledger_findings": [dict(f) for f in findings],
        "ledger_valid_but_for_faulty_members": verified or (
            bool(chain_valid) and bool(findings) and all(f["scenario_fault"] for f in findings)
        ),
        "reproducible": scenario.training.reproducible,
        "reproduce": f"concilium sim run {(shown_as or out) / 'scenario.toml'}"
        + (" --reproducible" if scenario.training.reproducible else ""),
        "verify": f"concilium ledger verify {(shown_as or out) / 'ledger'}",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def scenario_toml(sc: Scenario) -> dict[str, Any]:
    """The scenario as a TOML table (what ``scenario.toml`` of a results folder holds)."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [conv(x) for x in v]
        if hasattr(v, "items"):
            return {k: conv(x) for k, x in v.items()}
        return v

    out: dict[str, Any] = conv(sc)
    if not out.get("app"):
        out.pop("app", None)
    return out


def write_scenario(scenario: Scenario, folder: Path) -> None:
    """``folder/scenario.toml`` for ``scenario``; its app, if any, copied to ``folder/app/`` and named relative to
    the file (``node.apps.copy_app``): a results or testnet folder that carries the code it ran."""
    table = scenario_toml(scenario)
    if scenario.app:
        from node.apps import copy_app, load_app  # noqa: PLC0415

        table["app"] = copy_app(load_app(scenario.app), folder / "app")
    (folder / "scenario.toml").write_text(tomli_w.dumps(table), encoding="utf-8")


def public_eval_for_ledger(path: Path) -> PublicEval | None:
    """The public-split evaluator a results ledger's strategy needs (Sself, FedAsync with the entropy filter),
    rebuilt from the ``scenario.toml`` beside it; None if there is none or it does not describe this chain."""
    path = Path(path)
    scenario_file = (path.parent if path.is_file() else path).parent / "scenario.toml"
    if not scenario_file.is_file():
        return None
    try:
        store, _ = open_ledger(path, readonly=True, check_index=False)
        with store:
            stored = store.genesis()
        if app_beside(path) is not None:  # the scenario names an app: only the one the genesis pins may be imported,
            # checked by its digest before the import (loading the scenario would import whatever it names)
            if pin_of(stored.protocol.params) is None:
                return None
            load_pinned_app(stored.protocol.params, app_beside(path), what="the ledger's genesis")
        scenario = load_scenario(scenario_file)
        if not scenario.data.public_size:
            return None
        sim = Simulation(scenario)
        # the same chain but for the initial model's digest: the evaluator needs the public split and the model's
        # architecture, not θ0, whose bits PyTorch's initialisation kernels round differently from CPU to CPU
        rebuilt = dataclasses.replace(sim.genesis, model=dataclasses.replace(sim.genesis.model, digest=stored.model.digest))
        same = rebuilt.hash() == stored.hash()
    except (ValueError, OSError, LedgerError, LearningError, NodeError):  # e.g. a scenario.toml of older, looser rules
        return None
    return sim.public_eval if same else None


def verify_ledger(path: Path, *, public: PublicEval | None = None, now_ms: int | None = None) -> tuple[bool, str]:
    """Full audit of a results ledger, re-executing every round (a chain whose rounds cannot be re-executed here is
    not verified), with the block times bounded by ``now_ms`` (default: the wall clock) as ``concilium ledger
    verify`` bounds them. ``(verified, verdict line)``; :func:`ledger_verdict` also tells a valid chain whose rounds
    were not re-executed from an invalid one."""
    status, line = ledger_verdict(path, public=public, now_ms=now_ms)
    return status == "ok", line


def ledger_verdict(path: Path, *, public: PublicEval | None = None, now_ms: int | None = None) -> tuple[str, str]:
    """``(status, verdict line)`` of :func:`verify_ledger`'s audit: ``"ok"``, ``"not_reexecuted"`` (every check
    but re-execution passed; the line names why the rounds could not be re-executed: never an OK, since the
    audit did not check what the rounds computed)
    or ``"fail"``."""
    _, line, status = _audit(path, public=public, now_ms=now_ms)
    return status, line


def _audit(path: Path, *, public: PublicEval | None, now_ms: int | None = None) -> tuple[AuditReport, str, str]:
    """:func:`ledger_verdict`'s report, verdict line and status."""
    caches = Caches()  # the blob store's, the audit's and the re-executor's
    store, blobs = open_ledger(path, readonly=True, check_index=False, caches=caches)
    with store:
        g = store.genesis()
        rx, why = ledger_reexecutor(g, path, public=public, public_for=public_eval_for_ledger, caches=caches)
        report = audit_chain(g, store.iter_rows(), blobs=blobs, reexecutor=rx,
                             now_ms=time.time_ns() // 1_000_000 if now_ms is None else now_ms, caches=caches)
    if not report.ok:
        return report, report.line(), "fail"
    if rx is None:
        return report, f"NOT RE-EXECUTED: {report.line().removeprefix('OK: ')}; its rounds were not re-executed: {why}", (
            "not_reexecuted")
    return report, report.line(), "ok"


def run_scenario(
    path: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str],
    seed: int | None = None,
    rounds: int | None = None,
    progress: bool = True,
    workers: int | None = None,
    force: bool = False,
    plots: bool = True,
    executor: Callable[[Simulation], Any] | None = None,
    on_summary: Callable[[dict[str, Any]], None] | None = None,
    reproducible: bool = False,
    sets: Sequence[str] = (),
    device: str | None = None,
) -> dict[str, Any]:
    """Run the scenario at ``path`` into the results folder ``out`` (new or empty; with ``force``, an earlier
    results folder is replaced once the new one is complete); return the summary. ``workers``: training
    processes beside the simulator (None = ``sim._workers.default_workers``); never changes results.
    ``executor``: where training jobs run instead (``sim._ray.RayExecutor``: a Ray cluster); never changes
    results either. ``plots=False``: no PNG files (see :func:`write_results`). ``on_summary``: called with the
    summary as soon as it is written, before the plots are waited for. ``reproducible``: train in reproducible mode
    (as the scenario key ``training.reproducible = true``; the process must have started in the mode's
    environment, ``learning.reproducible``). ``sets``: ``--set KEY=VALUE`` overrides of the scenario
    (``sim.apply_sets``); the results folder's ``scenario.toml`` holds the scenario they make, so its reproduce
    command runs it again. ``device``: this run's training device instead of the scenario's (``"auto"``, ``"cpu"``,
    ``"cuda"``, ``"cuda:N"``, ``"mps"``; :func:`resolve_device`).

    Bad input raises :class:`ConfigFileError` (the scenario) or :class:`OutputPathError` (``out``) and leaves
    nothing behind; so does a run whose local training diverges until no block can be committed."""
    scenario = load_scenario(path, seed=seed, rounds=rounds, sets=sets)
    if reproducible and not scenario.training.reproducible:
        scenario = dataclasses.replace(scenario, training=dataclasses.replace(scenario.training, reproducible=True))
    # the device this run trains on (the results' scenario.toml records it: "auto" resolved)
    dev = resolve_device(device or scenario.training.device, "--device" if device else path)
    if dev != scenario.training.device:
        scenario = dataclasses.replace(scenario, training=dataclasses.replace(scenario.training, device=dev))
    with results_folder(out, force=force) as build:
        try:
            sim = Simulation(scenario, ledger_dir=build / "ledger", on_round=None, workers=workers, executor=executor)
        except ValueError as e:  # a configuration the loader could not judge without the data
            raise ConfigFileError(f"{path}: {e}") from None
        except (MemoryError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and "allocat" not in str(e):
                raise
            raise ConfigFileError(f"{path}: does not fit in memory ({str(e).splitlines()[0][:160]})") from None
        check_model_fits(sim, path)
        bar = None
        # a progress bar on a terminal; in a log file (stderr not a terminal) one plain line every tenth of the run,
        # with no carriage-return frames, which a log file would keep
        plain = progress and not sys.stderr.isatty()
        every = max(1, scenario.rounds // 10)
        t_start = time.perf_counter()
        if progress and not plain:
            from tqdm import tqdm

            bar = tqdm(total=scenario.rounds, desc=scenario.name, unit="round", file=sys.stderr)

        def on_round(m: RoundMetrics) -> None:
            acc = "" if math.isnan(m.accuracy) else f"acc {m.accuracy:.3f} "
            if bar is not None:
                bar.set_postfix_str(f"round {m.fl_round} {acc}committee {m.committee} byz-acc {m.byzantine_accepted}")
                bar.update(1)
            elif plain and (m.fl_round % every == 0 or m.fl_round == scenario.rounds):
                print(f"{scenario.name}: round {m.fl_round}/{scenario.rounds} {acc}byz-acc {m.byzantine_accepted} "
                      f"view {m.view} ({time.perf_counter() - t_start:.1f} s)", file=sys.stderr, flush=True)

        sim._on_round = on_round

        def finish(res: SimResult, *, partial: bool = False) -> dict[str, Any]:
            plotter = _Plotter(build, res) if plots else None  # drawn beside the audit
            try:
                report, verdict, status = _audit(build / "ledger", public=sim.public_eval)
                findings = [
                    {"height": f.height, "member": f"n{sim.index[f.offender]}" if f.offender in sim.index else f.offender,
                     "scenario_fault": sim.scenario_faulty(f.offender, f.height), "reason": f.reason}
                    for f in report.findings
                ]
                summary = write_results(
                    build, scenario, res, verdict, status == "ok", shown_as=Path(os.fspath(out)), plots=False,
                    findings=findings, chain_valid=report.chain_valid, status=status, partial=partial,
                )
                if on_summary is not None and not partial:
                    on_summary(summary)
                if plotter is not None:
                    plotter.wait()
            except BaseException:
                if plotter is not None:
                    plotter.stop()
                raise
            return summary

        try:
            res = sim.run()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (node.Terminated): the rounds completed, marked partial
            if bar is not None:
                bar.close()
                bar = None
            if sim.metrics:
                finish(sim.partial_result(), partial=True)
            raise
        except LivenessError:
            if sim.diverged_jobs:  # nothing finite to aggregate: the configuration, not the network
                raise ConfigFileError(
                    f"{path}: local training diverged to non-finite values ({sim.diverged_jobs} jobs) and no block "
                    f"could be committed after height {len(sim.metrics)}: lower training.lr ({scenario.training.lr})"
                ) from None
            raise
        finally:
            if bar is not None:
                bar.close()
        if sim.diverged_jobs and all(m.accepted == 0 and m.stale_accepted == 0 for m in res.rounds):
            # every height was decided without an update (by re-drawn committees, as skips)
            raise ConfigFileError(
                f"{path}: local training diverged to non-finite values ({sim.diverged_jobs} jobs) and no round "
                f"aggregated an update in {len(res.rounds)} rounds: lower training.lr ({scenario.training.lr})"
            )
        return finish(res)


def check_model_fits(sim: Simulation, source: str | os.PathLike[str]) -> None:
    """Before any training: the model takes the dataset's inputs and has a logit for every class, token ids fit
    its embedding, and a job's activations and minibatch indices fit ``MEMORY_BYTES_MAX``. One forward pass of
    one test sample; a mismatch would otherwise surface as a torch error in the middle of the run."""
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    sc, module, test = sim.sc, sim.trainer.module, sim.test
    where = f"{source}: model {sc.model.name!r} on dataset {sc.data.dataset!r}"
    sizes: list[int] = []

    def count(_m: Any, _inp: Any, out: Any) -> None:
        outs = out if isinstance(out, tuple) else (out,)
        sizes.append(sum(o.numel() for o in outs if isinstance(o, torch.Tensor)))

    embedding = next((m for m in module.modules() if isinstance(m, nn.Embedding)), None)
    if embedding is not None and not test.x.is_floating_point():
        top = max(int(d.x.max()) for d in (test, *sim.client_data) if len(d))
        if top >= embedding.num_embeddings:
            raise ConfigFileError(f"{where}: token id {top} but the embedding has {embedding.num_embeddings} rows")
    hooks = [m.register_forward_hook(count) for m in module.modules()]
    training = module.training
    try:
        module.eval()
        with torch.no_grad():
            logits = module(test.x[:1])
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        shape = tuple(test.x.shape[1:])
        raise ConfigFileError(f"{where}: the model does not take inputs of shape {shape} ({str(e).splitlines()[0][:160]})") from None
    finally:
        for h in hooks:
            h.remove()
        module.train(training)
    if logits.dim() != 2 or logits.shape[1] < test.num_classes:
        raise ConfigFileError(f"{where}: the model outputs {tuple(logits.shape[1:])} logits for {test.num_classes} classes")
    tr = sc.training
    # forward activations, their gradients and the optimizer's temporaries: about 3 float32 copies per sample
    activations = 12 * sum(sizes) * tr.batch_size
    largest = max((len(d) for d in sim.client_data), default=0)
    indices = 8 * (tr.epochs * largest if tr.epochs else tr.steps * tr.batch_size)
    for what, need in (("activations of one minibatch", activations), ("minibatch indices of one job", indices)):
        if need > MEMORY_BYTES_MAX:
            raise ConfigFileError(
                f"{where}: the {what} need about {need / 2**30:.0f} GiB, more than {MEMORY_BYTES_MAX >> 30} GiB "
                "(lower training.batch_size, steps or epochs)"
            )


@contextlib.contextmanager
def results_folder(out: str | os.PathLike[str], *, force: bool = False) -> Iterator[Path]:
    """The folder to build results in; they are at ``out`` when the block ends without an exception.

    A new or empty ``out`` is built in place, so a run stopped with Ctrl-C keeps the blocks it decided and a
    killed one leaves its ledger's valid prefix; any other failure removes what was built (and the parent
    folders made for it). Refused before anything is written (:class:`OutputPathError`): an empty name, a
    symbolic link, a file, a path under a file, an unwritable place, and a non-empty folder unless ``force``.
    With ``force``, only an earlier results folder (holding ``ledger/`` or ``summary.json``) is replaced: the
    new one is built beside it and swapped in by two renames once complete, so ``out`` holds the old results
    or the new ones, never a part; a failure, Ctrl-C included, leaves the old one as it was.
    """
    out = output_path(out, "folder")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputPathError(f"{out}: {e.strerror}" + (" (a parent is not a folder)" if isinstance(e, NotADirectoryError) else "")) from None
    replace = False
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OutputPathError(f"{out}: is a symbolic link (give the results folder itself)")
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{out}: exists and is not a folder")
        if any(out.iterdir()):
            if not force:
                raise OutputPathError(f"{out}: already exists and is not empty (use --force to replace it)")
            if not ((out / "ledger").is_dir() or (out / "summary.json").is_file()):
                raise OutputPathError(f"{out}: not a results folder (no ledger/ or summary.json); --force replaces only those")
            if os.path.ismount(out):
                raise OutputPathError(f"{out}: is a mount point; --force cannot replace it (use a folder inside it)")
            replace = True
    made: list[Path] = []  # folders created here, outermost first
    try:
        if replace:
            build = Path(tempfile.mkdtemp(prefix=f".{out.name[:100]}.tmp-", dir=out.parent))
            os.chmod(build, stat.S_IMODE(st.st_mode))  # mkdtemp makes 0700: keep the folder's own mode
        elif st is None:
            missing = [out, *(p for p in out.parents if not p.exists())]
            for d in reversed(missing):
                d.mkdir()
                made.append(d)
            build = out
        else:  # an empty folder: is it writable?
            build = out
            probe = out / f".probe-{secrets.token_hex(4)}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
    except OSError as e:
        _remove(made)
        raise OutputPathError(f"{out}: cannot create the results folder: {e.strerror}") from None
    try:
        yield build
    except KeyboardInterrupt:
        if replace:
            shutil.rmtree(build, ignore_errors=True)
        raise
    except BaseException:
        if replace:
            shutil.rmtree(build, ignore_errors=True)
        elif made:
            _remove(made)
        else:  # the folder was empty: empty it again
            for child in list(build.iterdir()):
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        raise
    if replace:
        old = out.parent / f".{out.name[:100]}.old-{secrets.token_hex(4)}"
        try:
            os.rename(out, old)
        except OSError as e:
            shutil.rmtree(build, ignore_errors=True)
            raise OutputPathError(f"{out}: cannot replace it: {e.strerror}") from None
        try:
            os.rename(build, out)
        except OSError as e:
            os.rename(old, out)
            shutil.rmtree(build, ignore_errors=True)
            raise OutputPathError(f"{out}: cannot replace it: {e.strerror}") from None
        shutil.rmtree(old, ignore_errors=True)


def _remove(made: list[Path]) -> None:
    """Remove the folders this run made (``made``: outermost first) with everything in them."""
    if made:
        shutil.rmtree(made[0], ignore_errors=True)
