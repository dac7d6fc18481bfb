"""A running node's counters in the Prometheus text exposition format (version 0.0.4).

Input: :meth:`node.runtime.NodeRuntime.metrics`, a snapshot dict (its ``status()`` plus the training
counters). Every sample is a counter or a gauge; label values are escaped as the format requires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CONTENT_TYPE", "prometheus_text"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_: str, samples: Iterable[tuple[Mapping[str, object], Any]]) -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            lab = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{lab}}} {_num(value)}" if lab else f"{name} {_num(value)}")


def _by(label: str, counts: Mapping[str, Any]) -> list[tuple[Mapping[str, object], Any]]:
    return [({label: k}, v) for k, v in sorted(counts.items())]


def prometheus_text(m: Mapping[str, Any]) -> str:
    """The exposition text of a node's metrics snapshot ``m`` (see the module docstring)."""
    net = m.get("net", {})
    t = _Text()
    t.metric("concilium_node_info", "gauge", "This node: chain, peer id and current role (value 1).",
             [({"chain": m.get("chain", ""), "peer": m.get("peer", ""), "role": m.get("role", "")}, 1)])
    t.metric("concilium_height", "gauge", "Height of the last block in this node's ledger.", [({}, m["stored"])])
    t.metric("concilium_fl_round", "gauge", "FL round of the last stored block (0 before the first).", [({}, m.get("fl_round", 0))])
    t.metric("concilium_view", "gauge", "Current pBFT view of this node's replica.", [({}, m["view"])])
    t.metric("concilium_committee_attempt", "gauge",
             "Committee attempt at the current height (> 0: its committee was re-drawn after redraw_ticks).",
             [({}, m.get("attempt", 0))])
    t.metric("concilium_rounds_total", "counter", "Rounds (blocks) this process stored: decided or synced.",
             [({}, m.get("rounds", 0))])
    t.metric("concilium_view_changes_total", "counter", "View changes in the blocks this process stored.",
             [({}, m["view_changes"])])
    t.metric("concilium_peers_connected", "gauge", "Members connected now.", [({}, m["peers"])])
    t.metric("concilium_peers_banned", "gauge", "Members banned now for exceeding their budget.",
             [({}, len(net.get("banned", ())))])
    t.metric("concilium_messages_sent_total", "counter", "Frames sent, by message kind.", _by("kind", net.get("messages_out", {})))
    t.metric("concilium_bytes_sent_total", "counter", "Bytes sent, by message kind.", _by("kind", net.get("bytes_out", {})))
    t.metric("concilium_messages_received_total", "counter", "Frames received, by protocol.",
             _by("protocol", net.get("messages_in", {})))
    t.metric("concilium_bytes_received_total", "counter", "Bytes received, by protocol.", _by("protocol", net.get("bytes_in", {})))
    dropped = (
        [({"layer": "node", "reason": k}, v) for k, v in sorted(m.get("dropped", {}).items())]
        + [({"layer": "consensus", "reason": k}, v) for k, v in sorted(m.get("consensus_dropped", {}).items())]
        + [({"layer": "transport", "reason": k}, v) for k, v in sorted(net.get("dropped", {}).items())]
    )
    t.metric("concilium_dropped_inputs_total", "counter", "Inputs dropped, by layer and reason.", dropped)
    t.metric("concilium_evidence_total", "counter", "Misbehaviour this node reported as evidence.", [({}, m["evidence"])])
    t.metric("concilium_blobs_fetched_total", "counter", "Blobs fetched from peers by digest.", [({}, m["fetched"])])
    t.metric("concilium_training_jobs_total", "counter", "Local training jobs, by result.",
             [({"result": "ok"}, m.get("trained", 0)), ({"result": "failed"}, m.get("train_failures", 0))])
    t.metric("concilium_training_seconds_total", "counter", "Wall seconds spent in local training jobs.",
             [({}, float(m.get("train_seconds", 0.0)))])
    local = m.get("local_eval")
    if isinstance(local, Mapping):  # this member's own validation split
        t.metric("concilium_local_accuracy", "gauge",
                 "Accuracy of the last committed model on this node's own validation split.",
                 [({"height": local.get("height", 0)}, float(local.get("accuracy", 0.0)))])
        t.metric("concilium_local_loss", "gauge",
                 "Cross-entropy of the last committed model on this node's own validation split.",
                 [({"height": local.get("height", 0)}, float(local.get("loss", 0.0)))])
        t.metric("concilium_local_validation_samples", "gauge", "Samples of this node's validation split.",
                 [({}, int(local.get("samples", 0)))])
    return "\n".join(t.lines) + "\n"
