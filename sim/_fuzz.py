"""A Byzantine-peer fuzzer: a protocol adversary between some peers' node cores and the simulated network.

The Byzantine peers run the honest node code; everything they *send* passes through :meth:`ByzantineFuzzer.
outgoing`, which may forward it, drop it, send it twice, send it elsewhere, replay an old message, or change
it - and then signs what it changed with the peer's own key, as a Byzantine peer really can: its own score
rows, votes, pre-prepares and update commitments are re-signed (a pre-prepare's header is re-bound to its
changed payload first), while what other peers signed keeps their signatures (changed, it no longer
verifies). It also fabricates ledger evidence against honest peers from their genuine signed messages, which
it observes on the way in (:meth:`observe`): a genuine pre-prepare called an invalid proposal, a genuine
score row called forged, two unrelated genuine messages called an equivocation.

Every mutation is a seeded draw, so a run is reproducible from ``(scenario, seed, fuzz seed)``. The
fuzzer checks the invariants a Byzantine minority must not break on every effect it sees: an honest node
never reports evidence against an honest peer (:meth:`on_evidence`); the test around it checks that no
exception escapes a node and that the honest nodes keep committing (the simulation finishes and its ledger
verifies).

Mutations by message kind (all of the envelope kinds of ``node._wire``):

* ``update``: ``n_samples``, ``fl_round`` or the digest changed and re-signed; the blob replaced (random
  bytes, a vector of the wrong size, huge values) with its digest re-signed; the commitment changed with the
  old signature kept; the update sent to peers outside the committee.
* ``scores``: a client's commitment changed inside the row with the client's signature kept (a member
  framing an honest client), distances scaled, zeroed or dropped, clients added, the reference or height changed -
  the row re-signed.
* ``pbft``: votes for another block, height or view; a pre-prepare whose payload carries fabricated
  evidence, another model digest, fewer updates or another next committee, its header re-bound and
  re-signed; decided blocks with a changed payload.
* ``want`` / ``blobs``: random or many digests; random, wrong-size or huge blobs.
* ``have`` (commitments a validator tells the primary of): a commitment's digest or round changed (another
  member's signature kept; its own re-signed), or 64 made-up commitments.
* ``refused`` (a proposal relayed with the evidence of its refusal): its payload changed, or an honest primary's
  genuine pre-prepare relayed instead (which must never become evidence against it).
* any kind: a random change anywhere in the decoded tree, raw garbage, a replay of an earlier message.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ledger import (
    BlockHeader,
    Evidence,
    Genesis,
    KeyPair,
    LedgerError,
    Payload,
    SignedMessage,
    decode,
    encode,
    make_header,
    sha256,
    sign_bytes,
    update_sign_bytes,
)
from learning import vector_to_blob

__all__ = ["MUTATIONS", "ByzantineFuzzer", "FuzzSpec", "FuzzViolation"]

_SEMANTIC: dict[str, tuple[str, ...]] = {
    "update": ("n_samples", "fl_round", "digest", "bad_blob", "forged_commitment", "garbage_blob"),
    "scores": ("frame_client", "distance", "drop_client", "swap_clients", "reference", "height", "extra_client"),
    "pbft": ("fabricated_evidence", "model_digest", "drop_update", "next_committee", "vote_block", "vote_view",
             "vote_height", "decided_block", "other"),
    "want": ("digests",),
    "blobs": ("bad_blobs",),
    "have": ("digest", "fl_round", "flood"),
    "refused": ("payload", "honest"),
}
MUTATIONS = tuple(f"{k}.{m}" for k, ms in _SEMANTIC.items() for m in ms) + (
    "tree", "replay", "garbage", "drop", "duplicate", "spray")
"""Every named tampering action (``FuzzSpec.only`` picks some)."""

_SIGNED_KEYS = frozenset({"body", "height", "kind", "signature", "signer", "view"})
_COMMITMENT_KEYS = frozenset({"digest", "fl_round", "n_samples", "peer", "signature"})
_OBSERVED_MAX = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class FuzzSpec:
    """Which members (by index) the fuzzer controls, its seed, and the share of their messages it tampers with."""

    members: tuple[int, ...]
    seed: int = 0
    rate: float = 0.5
    only: tuple[str, ...] = ()
    """Restrict tampering to these named mutations (e.g. ``("scores.frame_client",)``; see
    :data:`MUTATIONS`); empty = all of them, chosen at random."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.only) - set(MUTATIONS))
        if unknown:
            raise ValueError(f"unknown fuzz mutation(s) {', '.join(unknown)}; known: {', '.join(MUTATIONS)}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("fuzz rate must be in [0, 1]")


class FuzzViolation(AssertionError):
    """An invariant broke under the fuzzer (the message names the step; replay it with the same seeds)."""


class ByzantineFuzzer:
    """Mutates what ``peers`` send (see the module docstring).

    Parameters
    ----------
    peers:
        The Byzantine peers (keep them at most ``f`` of any committee, or liveness may legitimately fail).
    keys:
        Their key pairs (to re-sign what they change).
    genesis:
        The chain (members, chain id).
    seed:
        Seeds every draw.
    rate:
        Probability that one outgoing message is tampered with (else it is forwarded as is).
    dim:
        The model size (for wrong-size and huge vector blobs).
    only:
        Restrict tampering to these named mutations (:data:`MUTATIONS`).
    also_byzantine:
        ``(peer, height) -> bool``: peers that other faults control (the scenario's corrupt coordinator, ...);
        evidence against them is not a violation either.
    """

    def __init__(
        self,
        *,
        peers: frozenset[str],
        keys: Mapping[str, KeyPair],
        genesis: Genesis,
        seed: int,
        rate: float = 0.5,
        dim: int = 8,
        only: tuple[str, ...] = (),
        also_byzantine: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.peers = frozenset(peers)
        self._keys = {p: keys[p] for p in self.peers}
        self._chain = genesis.chain_id
        self._members = tuple(genesis.member_ids)
        self._rng = random.Random(seed)
        self._rate = rate
        self._dim = dim
        self._only = frozenset(only)
        self._also_byzantine = also_byzantine
        self._observed: deque[bytes] = deque(maxlen=_OBSERVED_MAX)
        self._honest_signed: dict[str, deque[SignedMessage]] = {}
        self._same: dict[bytes, list[tuple[str | None, bytes]]] = {}
        self.counts: dict[str, int] = {}
        """Tampering actions taken, by name (for the report)."""
        self.steps = 0
        """Messages from Byzantine peers seen."""
        self.evidence_checked = 0
        self.accused: dict[tuple[str, str], int] = {}
        """``(evidence kind, offender) → times seen`` (reported by a node or carried by a block)."""

    # --- the hooks the simulator calls -------------------------------------------------------------

    def observe(self, sender: str, data: bytes) -> None:
        """A Byzantine peer received ``data`` from ``sender``: keep it for replays and honest signatures."""
        self._observed.append(data)
        if sender in self.peers:
            return
        try:
            env = decode(data)
        except LedgerError:
            return
        for sm in _signed_messages(env):
            if sm.signer not in self.peers:
                self._honest_signed.setdefault(sm.signer, deque(maxlen=16)).append(sm)

    def byzantine(self, peer: str, height: int) -> bool:
        """Is ``peer`` Byzantine at ``height``: one of the fuzzed peers, or one the scenario's own faults control?"""
        return peer in self.peers or bool(self._also_byzantine and self._also_byzantine(peer, height))

    def on_evidence(self, reporter: str, ev: Evidence, *, where: str) -> None:
        """Evidence a node reported or a block carried: it must name a Byzantine peer."""
        self.evidence_checked += 1
        self.accused[(ev.kind, ev.offender)] = self.accused.get((ev.kind, ev.offender), 0) + 1
        if not self.byzantine(ev.offender, ev.height):
            raise FuzzViolation(
                f"{where}: evidence ({ev.kind}, height {ev.height}) names the honest peer {ev.offender} "
                f"(reported by {reporter}): {ev.reason}"
            )

    def outgoing(self, frm: str, to: str, data: bytes) -> list[tuple[str, bytes]]:
        """What the network carries instead of ``data`` from the Byzantine peer ``frm`` to ``to``:
        ``(recipient, bytes)`` pairs (possibly none, possibly to other peers)."""
        self.steps += 1
        r = self._rng
        if r.random() >= self._rate:
            return [(to, data)]
        same = self._same.get(data)
        if same is not None and r.random() < 0.7:  # the same tampered message to every recipient (a quorum may form)
            self._count("consistent")
            return [(to if t is None else t, d) for t, d in same]
        actions, weights = ("semantic", "tree", "replay", "garbage", "drop", "duplicate", "spray"), (6, 4, 1, 1, 1, 1, 1)
        if self._only:
            allowed = [(a, w) for a, w in zip(actions, weights) if a in self._only or (a == "semantic" and any("." in o for o in self._only))]
            if not allowed:
                return [(to, data)]
            actions, weights = tuple(a for a, _ in allowed), tuple(w for _, w in allowed)
        action = r.choices(actions, weights=weights)[0]
        if action != "semantic":
            self._count(action)
        out: list[tuple[str | None, bytes]]
        if action == "drop":
            out = []
        elif action == "duplicate":
            out = [(None, data), (None, data)]
        elif action == "spray":  # to somebody it was not meant for
            out = [(r.choice(self._members), data), (None, data)]
        elif action == "replay" and self._observed:
            out = [(None, r.choice(self._observed))]
        elif action == "garbage":
            out = [(None, _garbage(data, r))]
        else:
            mutated = self._mutate(frm, data, semantic=action == "semantic")
            if mutated is None:
                return [(to, data)]  # nothing of the allowed kind to change in this message
            out = [(None, mutated)]
        if len(self._same) > 256:
            self._same.clear()
        self._same[data] = out
        return [(to if t is None else t, d) for t, d in out]

    # --- mutations ---------------------------------------------------------------------------------

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def _mutate(self, frm: str, data: bytes, *, semantic: bool) -> bytes | None:
        try:
            env = _thaw(decode(data))
        except LedgerError:
            return None
        if not isinstance(env, dict):
            return None
        r = self._rng
        kind = next((k for k in _SEMANTIC if env.get(k) is not None), None)
        if semantic:
            if kind is None:
                return None
            names = [m for m in _SEMANTIC[kind] if not self._only or f"{kind}.{m}" in self._only]
            if not names:
                return None
            name = r.choice(names)
            fn: Callable[[str, dict[str, Any], str], bool] = getattr(self, f"_semantic_{kind}")
            if not fn(frm, env, name):
                return None
            self._count(f"{kind}.{name}")
        else:
            for _ in range(r.choice((1, 1, 2, 3))):
                _tree_mutate(env, r, self._members)
        self._rebind(env)
        self._resign(frm, env)
        try:
            return encode(env)
        except (LedgerError, ValueError, TypeError, OverflowError):
            return _garbage(data, r)

    def _semantic_update(self, frm: str, env: dict[str, Any], name: str) -> bool:
        r = self._rng
        c = env["update"]["commitment"]
        if name == "n_samples":
            c["n_samples"] = r.choice((0, c["n_samples"] + 1, 2**53 - 1))
        elif name == "fl_round":
            c["fl_round"] = max(0, c["fl_round"] + r.choice((-1, 1, 2)))
        elif name == "digest":
            c["digest"] = r.randbytes(32)
        elif name == "bad_blob":  # another blob, correctly committed to
            blob = self._bad_blob()
            env["update"]["blob"] = blob
            c["digest"] = sha256(blob)
        elif name == "forged_commitment":  # another member's commitment (not re-signed: not the sender's own)
            c["n_samples"] = c["n_samples"] + 1
            c["signature"] = bytes(64) if r.random() < 0.5 else c["signature"]
            c["peer"] = r.choice([m for m in self._members if m != frm])
        else:
            env["update"]["blob"] = r.randbytes(r.choice((0, 7, 64, 300)))
        return True

    def _semantic_scores(self, frm: str, env: dict[str, Any], name: str) -> bool:
        r = self._rng
        row = env["scores"]
        body = row["body"]
        ups, dist = body.get("updates"), body.get("distances")
        if name in ("frame_client", "distance", "drop_client", "extra_client") and not ups:
            return False
        if name == "frame_client":  # framing: a client's n_samples changed inside the row, its signature kept
            k = r.choice(sorted(ups))
            ups[k][1] = ups[k][1] + 1
        elif name == "distance":
            k = r.choice(sorted(dist))
            dist[k] = r.choice((0.0, 1e-300, 1e300, dist[k] * 1000.0, dist[k] / 1000.0))
        elif name == "drop_client":
            k = r.choice(sorted(dist))
            dist.pop(k)
            ups.pop(k, None)
        elif name == "swap_clients":
            if not ups or len(ups) < 2:
                return False
            a, b = r.sample(sorted(ups), 2)
            ups[a], ups[b] = ups[b], ups[a]
        elif name == "reference":
            body["reference"] = r.randbytes(32)
        elif name == "height":
            row["height"] = max(0, row["height"] + r.choice((-1, 1)))
        else:  # a client that did not train, with somebody's commitment
            k = r.choice(self._members)
            dist[k] = 1.0
            ups[k] = list(ups[r.choice(sorted(ups))])
        return True

    def _semantic_pbft(self, frm: str, env: dict[str, Any], name: str) -> bool:
        r = self._rng
        msg = env["pbft"]
        signed, payload, block = msg.get("signed"), msg.get("payload"), msg.get("block")
        kind = None if signed is None else signed.get("kind")
        if name == "decided_block":  # its certificate is others' signatures
            if block is None:
                return False
            _tree_mutate(block["payload"], r, self._members)
        elif name in ("fabricated_evidence", "model_digest", "drop_update", "next_committee"):
            if kind != "pre_prepare" or payload is None:
                return False
            if name == "fabricated_evidence":
                fabricated = self._fabricated_evidence(r)
                if fabricated is None:
                    return False
                payload["evidence"] = list(payload.get("evidence", [])) + [fabricated.to_value()]
            elif name == "model_digest":
                payload["model_digest"] = r.randbytes(32)
            elif name == "drop_update":
                if not payload.get("updates"):
                    return False
                payload["updates"] = payload["updates"][:-1]
            else:
                nxt = list(payload.get("next_committee", []))
                if not nxt:
                    return False
                nxt[r.randrange(len(nxt))] = r.choice(self._members)
                payload["next_committee"] = sorted(set(nxt))
        elif name in ("vote_block", "vote_view", "vote_height"):
            if kind not in ("prepare", "commit"):
                return False
            if name == "vote_block":
                signed["body"]["block_hash"] = r.randbytes(32)
            elif name == "vote_view":
                signed["view"] = max(0, signed["view"] + r.choice((-1, 1)))
            else:
                signed["height"] = max(0, signed["height"] + r.choice((-1, 1)))
        else:  # view changes, new views, sync requests, anything: a random change in the tree
            _tree_mutate(msg, r, self._members)
        return True

    def _semantic_have(self, frm: str, env: dict[str, Any], name: str) -> bool:
        r = self._rng
        have = env["have"]
        if name == "flood":
            env["have"] = [{"digest": r.randbytes(32), "fl_round": r.randrange(1, 1 << 20), "n_samples": r.randrange(1 << 20),
                            "peer": r.choice(self._members), "signature": r.randbytes(64)} for _ in range(64)]
        elif name == "digest":
            r.choice(have)["digest"] = r.randbytes(32)
        else:
            c = r.choice(have)
            c["fl_round"] = max(0, c["fl_round"] + r.choice((-1, 1)))
        return True

    def _semantic_refused(self, frm: str, env: dict[str, Any], name: str) -> bool:
        r = self._rng
        msg = env["refused"]
        if name == "payload":
            if not isinstance(msg.get("payload"), dict):
                return False
            msg["payload"]["model_digest"] = r.randbytes(32)
            return True
        honest = [m for q in self._honest_signed.values() for m in q if m.kind == "pre_prepare"]
        if not honest:
            return False
        msg["signed"] = _thaw(r.choice(honest).to_value())
        return True

    def _semantic_want(self, frm: str, env: dict[str, Any], name: str) -> bool:
        r = self._rng
        env["want"] = [r.randbytes(32) for _ in range(r.choice((1, 64)))]
        return True

    def _semantic_blobs(self, frm: str, env: dict[str, Any], name: str) -> bool:
        r = self._rng
        env["blobs"] = [self._bad_blob() if r.random() < 0.7 else r.randbytes(40) for _ in range(r.choice((1, 2)))]
        return True

    def _bad_blob(self) -> bytes:
        r = self._rng
        choice = r.randrange(3)
        if choice == 0:
            return vector_to_blob(np.zeros(max(1, self._dim + r.choice((-1, 1, 7))), dtype=np.float32))
        if choice == 1:
            return vector_to_blob(np.full(self._dim, 3.0e38, dtype=np.float32))
        return vector_to_blob(np.asarray([r.uniform(-1, 1) for _ in range(self._dim)], dtype=np.float32))

    def _fabricated_evidence(self, r: random.Random) -> Evidence | None:
        """Evidence against an honest peer from its genuine signed messages (it must never be accepted)."""
        honest = sorted(p for p, q in self._honest_signed.items() if q)
        if not honest:
            return None
        who = r.choice(honest)
        seen = list(self._honest_signed[who])
        pre = [m for m in seen if m.kind == "pre_prepare"]
        rows = [m for m in seen if m.kind == "cmfl_scores"]
        choice = r.randrange(4)
        self._count(("fabricate.invalid_proposal", "fabricate.invalid_score_row", "fabricate.equivocation",
                     "fabricate.unknown_kind")[choice])
        try:
            if choice == 0 and pre:
                x = r.choice(pre)
                return Evidence(kind="invalid_proposal", offender=who, height=x.height, view=x.view, exhibits=(x,),
                                reason="fabricated")
            if choice == 1 and rows:
                x = r.choice(rows)
                return Evidence(kind="invalid_score_row", offender=who, height=x.height, view=x.view, exhibits=(x,),
                                reason="fabricated")
            if choice == 2 and len(seen) >= 2:
                a, b = r.sample(seen, 2)
                return Evidence(kind="equivocation", offender=who, height=a.height, view=a.view,
                                exhibits=tuple(sorted((a, b), key=lambda m: m.encode())), reason="fabricated")
            x = r.choice(seen)
            return Evidence(kind="made_up", offender=who, height=x.height, view=x.view, exhibits=(x,), reason="fabricated")
        except ValueError:
            return None

    # --- signatures and bindings ---------------------------------------------------------------------

    def _rebind(self, env: dict[str, Any]) -> None:
        """A pre-prepare whose payload changed gets the header a Byzantine primary would sign for it."""
        msg = env.get("pbft")
        if not isinstance(msg, dict):
            return
        signed, payload = msg.get("signed"), msg.get("payload")
        if not isinstance(signed, dict) or signed.get("kind") != "pre_prepare" or payload is None:
            return
        try:
            body = signed["body"]
            hd = BlockHeader.from_value(body["header"])
            pl = Payload.from_value(payload)
            new = make_header(chain_id=hd.chain_id, height=hd.height, prev_hash=hd.prev_hash, view=hd.view,
                              proposer=hd.proposer, time_ms=hd.time_ms, payload=pl, fl_round=hd.fl_round)
            body["header"] = new.to_value()
        except (LedgerError, ValueError, TypeError, KeyError, OverflowError):
            return

    def _resign(self, frm: str, v: Any) -> None:
        """Re-sign, innermost first, every signed message and update commitment of ``frm`` inside ``v``."""
        key = self._keys[frm]
        if isinstance(v, list):
            for x in v:
                self._resign(frm, x)
            return
        if not isinstance(v, dict):
            return
        for x in v.values():
            self._resign(frm, x)
        keys = v.keys()
        try:
            if keys == _SIGNED_KEYS and v["signer"] == frm:
                v["signature"] = key.sign(sign_bytes(self._chain, v["kind"], v["height"], v["view"], v["body"]))
            elif keys == _COMMITMENT_KEYS and v["peer"] == frm:
                v["signature"] = key.sign(update_sign_bytes(self._chain, frm, v["fl_round"], v["digest"], v["n_samples"]))
        except (LedgerError, ValueError, TypeError, OverflowError):
            return


def _thaw(v: Any) -> Any:
    """A decoded value with every tuple a list and every map a fresh dict (so it can be changed in place)."""
    if isinstance(v, (list, tuple)):
        return [_thaw(x) for x in v]
    if isinstance(v, dict):
        return {k: _thaw(x) for k, x in v.items()}
    return v


def _signed_messages(v: Any) -> list[SignedMessage]:
    """Every well-formed signed message and update commitment (as a kind-"update" message) inside ``v``."""
    out: list[SignedMessage] = []
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
            try:
                if x.keys() == _SIGNED_KEYS:
                    out.append(SignedMessage.from_value(x))
                elif x.keys() == _COMMITMENT_KEYS:
                    body = {"digest": x["digest"], "n_samples": x["n_samples"], "peer": x["peer"]}
                    out.append(SignedMessage(signer=x["peer"], kind="update", height=x["fl_round"], view=0, body=body,
                                             signature=x["signature"]))
            except (LedgerError, ValueError, TypeError, OverflowError):
                pass
    return out


def _garbage(data: bytes, r: random.Random) -> bytes:
    choice = r.randrange(4)
    if choice == 0 and data:
        b = bytearray(data)
        for _ in range(r.choice((1, 3, 10))):
            b[r.randrange(len(b))] ^= 1 << r.randrange(8)
        return bytes(b)
    if choice == 1:
        return data[: r.randrange(len(data) + 1)]
    if choice == 2:
        return data + r.randbytes(r.choice((1, 9)))
    return r.randbytes(r.choice((0, 1, 33, 500)))


def _tree_mutate(v: Any, r: random.Random, members: tuple[str, ...]) -> None:
    """Change one randomly chosen node of the decoded tree ``v`` in place (type-aware)."""
    slots: list[tuple[Any, Any]] = []
    stack = [v]
    while stack and len(slots) < 4000:
        x = stack.pop()
        if isinstance(x, dict):
            for k in x:
                slots.append((x, k))
                stack.append(x[k])
        elif isinstance(x, list):
            for i in range(len(x)):
                slots.append((x, i))
                stack.append(x[i])
    if not slots:
        return
    parent, k = r.choice(slots)
    x = parent[k]
    if isinstance(x, bool):
        parent[k] = not x
    elif isinstance(x, int):
        parent[k] = r.choice((x + 1, x - 1, 0, -1, 2**31, 2**63 - 1, -(2**63), x * 2))
    elif isinstance(x, float):
        parent[k] = r.choice((x * 2.0, -x, 0.0, 1e300, 5e-324))
    elif isinstance(x, bytes):
        choice = r.randrange(4)
        if choice == 0 and x:
            b = bytearray(x)
            b[r.randrange(len(b))] ^= 0xFF
            parent[k] = bytes(b)
        elif choice == 1:
            parent[k] = x[: len(x) // 2]
        elif choice == 2:
            parent[k] = x + b"\x00"
        else:
            parent[k] = r.randbytes(len(x))
    elif isinstance(x, str):
        parent[k] = r.choice((r.choice(members), "", x + "x"))
    elif isinstance(x, list):
        choice = r.randrange(4)
        if choice == 0 and x:
            x.pop(r.randrange(len(x)))
        elif choice == 1 and x:
            x.append(x[r.randrange(len(x))])
        elif choice == 2 and len(x) >= 2:
            i, j = r.sample(range(len(x)), 2)
            x[i], x[j] = x[j], x[i]
        else:
            parent[k] = []
    elif isinstance(x, dict):
        choice = r.randrange(3)
        if choice == 0 and x:
            x.pop(r.choice(sorted(x)))
        elif choice == 1:
            x["zz_unknown"] = 1
        else:
            parent[k] = None
    elif x is None:
        parent[k] = r.choice((0, {}, b"", []))
