"""jit/cores.py, the arbiter of spatial sharing (NOTE [spatial sharing]), with stand-in launches: weights divide
core-time, a tenant alone gets every core it can use, and a launch boundary does not hand a tenant's cores away
before the next tick."""

from __future__ import annotations

import time

from jit.cores import TICK_S, Arbiter


class _Launch:
    def __init__(self, demand: int = 2) -> None:
        self.demand, self.allowed = demand, 0

    def allow(self, n: int, contended: bool = False) -> None:
        self.allowed = n


def test_weights_divide_core_time() -> None:
    a = Arbiter(2)
    s3, s1 = a.share("w3", 3.0), a.share("w1", 1.0)
    a.enter(s3, _Launch())
    a.enter(s1, _Launch())
    time.sleep(60 * TICK_S)
    with a.lock:
        a._account()
        assert abs(s3.alloc_s / s1.alloc_s - 3.0) < 0.2, (s3.alloc_s, s1.alloc_s)


def test_a_tenant_alone_gets_every_core_even_when_it_owes() -> None:
    a = Arbiter(2)
    s = a.share("alone")
    s.credit = -2.0  # it had more than its share while others ran
    lc = _Launch()
    a.enter(s, lc)
    assert lc.allowed == 2


def test_a_launch_boundary_keeps_the_cores_until_the_tick(monkeypatch) -> None:
    import jit.cores as C

    monkeypatch.setattr(C, "TICK_S", 0.3)  # long ticks: a re-division between them is the leave's doing
    a = Arbiter(2)
    s3, s1 = a.share("w3", 3.0), a.share("w1", 1.0)
    l3, l1 = _Launch(), _Launch()
    a.enter(s3, l3)
    a.enter(s1, l1)
    time.sleep(0.05)  # the ticker is waiting for its next tick
    before = l1.allowed
    a.leave(s3, l3, 0.0)
    time.sleep(0.03)
    assert l1.allowed == before  # w3's next launch follows at once; w1 is not grown only to be shrunk
    a.enter(s3, _Launch())
    a.leave(s3, s3.launches[0], 0.0)
    time.sleep(0.7)
    assert l1.allowed == 2  # ... and when w3 has really stopped, w1 has both cores from the next tick on


def test_workers_claim_block_by_block_while_another_tenant_was_recently_busy() -> None:
    class _Chunked(_Launch):
        def allow(self, n: int, contended: bool = False) -> None:
            self.allowed, self.contended = n, contended

    a = Arbiter(2)
    big, small = a.share("big"), a.share("small")
    first = _Chunked()
    a.enter(big, first)
    assert not first.contended  # alone: chunks of blocks
    blip = _Chunked(1)
    a.enter(small, blip)
    a.leave(small, blip, 0.0)  # the small tenant is between two launches
    nxt = _Chunked()
    a.leave(big, first, 0.0)
    a.enter(big, nxt)
    assert nxt.contended  # its next small launch will not wait for a chunk of ours
