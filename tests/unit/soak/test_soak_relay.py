"""The relay's rewriting of a Sentinel's answers (``relay.Rewrite``): each data node's port
answered as the port of the worker's relay to it, however the answer is cut into reads, and
nothing else touched."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st
from soak.relay import Rewrite

PORTS = {b"6379": b"41234", b"16380": b"999"}


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


# SENTINEL MASTERS as RESP2 sends it, with values that look like ports but are not one of them
MASTERS = (
    b"*1\r\n*8\r\n" + bulk(b"name") + bulk(b"crawl") + bulk(b"ip") + bulk(b"127.0.0.1")
    + bulk(b"port") + bulk(b"6379") + bulk(b"num-slaves") + bulk(b"16380")
    + b":6379\r\n" + bulk(b"63790") + bulk(b"a$6379") + bulk(b"$4\r\n6379")
)  # fmt: skip
EXPECTED = (
    b"*1\r\n*8\r\n" + bulk(b"name") + bulk(b"crawl") + bulk(b"ip") + bulk(b"127.0.0.1")
    + bulk(b"port") + bulk(b"41234") + bulk(b"num-slaves") + bulk(b"999")
    + b":6379\r\n" + bulk(b"63790") + bulk(b"a$6379") + bulk(b"$4\r\n6379")
)  # fmt: skip


def test_a_node_port_is_answered_as_its_relay_port_and_nothing_else_changes() -> None:
    assert Rewrite(PORTS)(MASTERS) == EXPECTED
    assert Rewrite(PORTS)(b"+OK\r\n") == b"+OK\r\n"


@given(st.lists(st.integers(0, len(MASTERS)), max_size=8))
def test_however_the_answer_is_cut_into_reads_it_comes_out_the_same(cuts: list[int]) -> None:
    rewrite = Rewrite(PORTS)
    bounds = [0, *sorted(cuts), len(MASTERS)]
    out = b"".join(rewrite(MASTERS[a:b]) for a, b in pairwise(bounds))
    assert out == EXPECTED
    assert rewrite.held == b""  # a whole answer is never held back
