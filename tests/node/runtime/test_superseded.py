"""Updates of a decided round are dropped from the send queues, between real transports on
127.0.0.1: a member that missed one round on a slow link must not send that round's update ahead of the next one's.
"""

from __future__ import annotations

import trio
import pytest

from ledger import KeyPair
from node.runtime._transport import Transport, TransportLimits

CHAIN = "superseded-test"
A, B = (KeyPair.derive(f"superseded-{name}") for name in "ab")
MEMBERS = [A.peer_id, B.peer_id]
LIMITS = TransportLimits(header_timeout_s=30.0, dial_timeout_s=5.0, backoff_min_s=0.1, backoff_max_s=0.3)


@pytest.mark.trio
async def test_discard_queued_drops_only_that_kind_and_the_rest_still_arrive() -> None:
    got: list[bytes] = []
    b = Transport(key=B, chain_id=CHAIN, members=MEMBERS, addresses={}, listen=["/ip4/127.0.0.1/tcp/0"],
                  on_frame=lambda sender, data: got.append(data), limits=LIMITS)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.run)
        # A knows B's address but does not run yet: everything it sends waits in its queues
        a = Transport(key=A, chain_id=CHAIN, members=MEMBERS, addresses={B.peer_id: b.listen_addrs()},
                      listen=["/ip4/127.0.0.1/tcp/0"], on_frame=lambda sender, data: None, limits=LIMITS)
        a.send(B.peer_id, b"update of round 3" * 1000, "update")
        a.send(B.peer_id, b"the model", "model")
        a.send(B.peer_id, b"a vote", "pbft")
        a.send(B.peer_id, b"relayed update of round 3", "update")
        assert a.discard_queued("update") == 2
        assert a.discard_queued("update") == 0
        assert a.stats.dropped == {"superseded": 2}
        a.send(B.peer_id, b"update of round 4", "update")  # sent after the round moved on: it goes out
        await nursery.start(a.run)
        with trio.fail_after(20):
            while len(got) < 3:
                await trio.sleep(0.02)
        await trio.sleep(0.2)
        assert sorted(got) == [b"a vote", b"the model", b"update of round 4"]
        assert a.stats.messages_out == {"model": 1, "pbft": 1, "update": 1}
        nursery.cancel_scope.cancel()
