"""A ``want`` effect carries its digests (``Transmit.want``), the same as its envelope asks for, so that the network
runtime fetches them without decoding the core's own message."""

from __future__ import annotations

from ledger import sha256
from node._wire import Envelope
from node.core import NodeCore, Transmit
from sim import load_scenario, resolve_scenario
from sim._world import World


def test_every_want_effect_carries_the_digests_of_its_envelope() -> None:
    world = World.build(load_scenario(resolve_scenario("testnet")))
    core = NodeCore(genesis=world.genesis, key=world.keys[0], initial_model=world.theta0)
    digests = [sha256(bytes([i])) for i in range(3)]
    effects = [fx for fx in core.want_blobs(digests) if isinstance(fx, Transmit) and fx.kind == "want"]
    assert effects, "wanting blobs asks a peer for them"
    for fx in effects:
        assert fx.want and fx.want == Envelope.decode(fx.data).want
        assert set(fx.want) <= set(digests)
    assert {d for fx in effects for d in fx.want} == set(digests)
    others = [fx for fx in core.ask_wanted() if isinstance(fx, Transmit)]
    assert all(fx.want == Envelope.decode(fx.data).want for fx in others if fx.kind == "want")
    assert all(fx.want == () for fx in others if fx.kind != "want")
