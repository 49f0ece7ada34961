"""Which processes listen on which TCP addresses (/proc): the decoding and a socket of this process."""

from __future__ import annotations

import os

import pytest
from rl_placement_ray.listeners import _hex_to_ip, describe, is_loopback, listening_sockets


def test_proc_addresses_decode():
    assert _hex_to_ip("0100007F") == "127.0.0.1"
    assert _hex_to_ip("00000000000000000000000001000000") == "::1"
    assert _hex_to_ip("0000000000000000FFFF00000100007F") == "::ffff:127.0.0.1"
    assert is_loopback("::ffff:127.0.0.1") and is_loopback("::1") and is_loopback("127.0.0.1")
    assert not is_loopback("::") and not is_loopback("0.0.0.0") and not is_loopback("192.0.2.2")


def test_own_listener_is_seen():
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        found = listening_sockets([os.getpid()])
    if found is None:
        pytest.skip("no /proc/net/tcp on this system")
    mine = [x for x in found if x["port"] == port]
    assert mine and mine[0]["ip"] == "0.0.0.0"
    assert "reachable from the network" in describe(mine)[0]
