"""How a node treats the members outside a round: the one choice a host makes about what the others receive.

The network runtime keeps the default (:class:`OutsiderPolicy` ``()``): every member gets every model and every
whole block, and follows every height. The simulator, with up to 10,000 members of whom about a hundred take part
in a round, injects a leaner policy from its scenario (``network.model_push`` and ``network.outsiders``). Every
policy gives the same ledger; what changes is the traffic and the work of the members outside a round.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OutsiderPolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OutsiderPolicy:
    """What a :class:`node.core.NodeCore` sends the members outside a round, and how it follows the chain when it
    is one of them. The default is the network runtime's."""

    models_for_all: bool = True
    """True (default): a proposer pushes the new model to every member outside its committee, and every node
    fetches a model it lacks. False: only to the members that need it at the next height (its trainers, reference
    trainers and validators), and a node fetches the model only when it needs it (``NodeCore._needs_model``), so a
    member outside the round receives the block alone (the simulator's 10,000 members). An ``archive`` node always
    wants every model."""

    headers_for_outsiders: bool = False
    """With ``models_for_all`` False, in coordinator mode, for a strategy without a staleness window: a proposer
    sends the members outside the next round the decided block's header and certificate alone
    (``consensus.decided_header_message``), not the block, and a node outside the round follows the chain by them
    (``ledger.apply_header``: the next committee follows from the header in coordinator mode); it takes the whole
    block whenever it has a role in the next round or holds evidence (``NodeCore._needs_payload``), and the proposer
    sends those members the block. Ignored where it does not apply. The ledger is the same."""

    lazy_outsiders: bool = False
    """Where ``headers_for_outsiders`` applies: a proposer sends the members outside the next round nothing at all,
    and a node outside the round sleeps (``consensus.Replica(lazy=True)``): it follows no block until a message
    shows it a later height (the block its proposer pushes it before a round where it has a role), then catches up
    by headers from that sender (``header_sync_request``) and takes the block it needs whole. A member outside a
    round then costs nothing in it; one that gets a role pays for the heights it slept through then. The push that
    wakes a client may be lost: the primary of its round sends it again once, half way to the collect deadline, to
    the clients it has no update from (``NodeCore._maybe_nudge``). A client sleeps again once its update is sent
    (``Replica.rest``: it does not fetch the block that ends its round). Each node keeps the last
    ``node.core.HEADERS_KEPT`` decided headers to serve others (and, with :attr:`shed_asleep`, its head's model at
    most while it sleeps).

    A departure from the plain sync (fetch the missing blocks and blobs), for the simulator's many members (a member
    that follows every block costs members × rounds in all): a lazy member fetches the missing heights' headers,
    checked by the header half of the chain rules (``ledger.apply_header``), and only the block it needs; the ledger
    is unchanged. With the genesis' ``committee_epoch`` ``E`` > 1 (``node.core.committee_epoch_of``) it goes
    further: it skips to the last header of each epoch (``consensus.Replica(committee_epoch=E)``), trusting the
    epoch's committee's certificate for the heights between, as a CometBFT light client's skipping verification
    does; the audit (``ledger verify``) still checks every block."""

    shed_asleep: bool = False
    """With ``lazy_outsiders``, for a blob store with ``retain(keep)`` (the simulator's in-memory one): a member that
    an input (a tick, a message, a finished job) leaves asleep with nothing to do (no role left at its height, no
    evidence, nothing wanted, not catching up, its next ticks idle) drops what it holds for the rounds it took part
    in: the updates and older models in its store and the models it validated, all but its head's model and strategy
    state (``NodeCore._shed``). The block that wakes it for a later round brings the model it needs then, so a member
    asleep holds one model at most, however many rounds it once took part in: the simulator's 10,000 members fit in
    memory. Ignored where ``lazy_outsiders`` does not apply. The ledger is the same."""
