"""What one client may hold in the gateway (server/gateway/limits.py): streams per key and per address, bytes per
both, each a 429 with Retry-After past its cap, and everything given back when a stream ends."""
from __future__ import annotations

import pytest

from server.gateway.limits import ADDRESS, KEY, ClientCaps, ClientTable

ALICE = ((ADDRESS, "10.0.0.1"), (KEY, "alice-key"))
ALICE_ELSEWHERE = ((ADDRESS, "10.0.0.2"), (KEY, "alice-key"))
BOB_SAME_HOST = ((ADDRESS, "10.0.0.1"), (KEY, "bob-key-01"))


def test_streams_are_capped_per_key_and_per_address_and_come_back_when_they_end():
    table = ClientTable(ClientCaps(max_streams_per_key=2, max_streams_per_address=2, max_bytes=1 << 20))
    leases = [table.admit(ALICE, 0), table.admit(ALICE_ELSEWHERE, 0)]
    refused = table.admit(ALICE, 0)  # the key has 2 in flight, from two addresses
    assert refused.status == 429 and refused.code == "too_many_streams" and refused.headers == {"Retry-After": "1"}
    assert not hasattr(table.admit(BOB_SAME_HOST, 0), "status")  # another key on the first address: its second
    refused = table.admit(((ADDRESS, "10.0.0.1"), (KEY, "carol-key")), 0)
    assert refused.code == "too_many_streams" and "address" in refused.message  # the address's cap of 2
    leases[0].release()
    leases[0].release()  # once only
    assert table.num_streams((KEY, "alice-key")) == 1 and table.num_streams((ADDRESS, "10.0.0.1")) == 1


def test_a_cap_of_zero_is_no_cap():
    table = ClientTable(ClientCaps(max_streams_per_key=0, max_streams_per_address=0))
    assert all(not hasattr(table.admit(ALICE, 0), "status") for _ in range(500))


def test_bytes_are_capped_per_client_and_given_back():
    table = ClientTable(ClientCaps(max_bytes=1000))
    first = table.admit(ALICE, 600)
    assert table.admit(ALICE_ELSEWHERE, 600).code == "too_many_bytes"  # the key holds 600 already
    second = table.admit(ALICE_ELSEWHERE, 300)
    assert not second.charge(200)  # 600 + 300 + 200 > 1000: nothing charged
    assert second.charge(100)
    first.refund(600)
    assert table.num_bytes((KEY, "alice-key")) == 400
    second.release()
    first.release()
    assert table.num_bytes((KEY, "alice-key")) == 0 and table.num_streams((KEY, "alice-key")) == 0


def test_caps_must_make_sense():
    with pytest.raises(ValueError):
        ClientCaps(max_streams_per_key=-1)
    with pytest.raises(ValueError):
        ClientCaps(max_bytes=0)
