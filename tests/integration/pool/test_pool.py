"""The pool end to end: a real etcd, controllers and three gpud nodes on loopback (issue 23's "must show")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time

import pytest

from tests.integration.pool.conftest import TTL, WOOLY, run_program
from woolyhv.pool.client import PoolClient, PoolError
from woolyhv.pool.local import wait_until
from woolyhv.pool.model import PlaceRequest

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH = os.path.join(HERE, "progs", "torch_prog.py")
NUMBA = os.path.join(HERE, "progs", "numba_prog.py")
GiB = 1 << 30

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def three(pool):  # type: ignore[no-untyped-def]
    from tests.conftest import free_port

    pool.metrics = {"controller": free_port(), "n1": free_port()}
    pool.controller("a", "--claim-s", "3", "--metrics-port", str(pool.metrics["controller"]))
    for name, mem in (("n1", 4 * GiB), ("n2", 8 * GiB), ("n3", 2 * GiB)):
        pool.node(name, mem, *(("--metrics-port", str(pool.metrics["n1"])) if name == "n1" else ()))
    pool.wait_nodes({"n1", "n2", "n3"})
    return pool


def scrape(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def placed_on(pool, tenant: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(decision, node) of every placement of ``tenant`` in the controllers' logs."""
    text = "".join(p.text() for p, _ in pool.controllers.values())
    return re.findall(rf"decision ([0-9a-f]+): {re.escape(tenant)} on (\S+) ", text)


def wooly(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WOOLY, *args], capture_output=True, text=True, timeout=60, env=dict(os.environ, **(env or {}))
    )


def test_torch_and_numba_programs_are_placed_and_explained(three) -> None:  # type: ignore[no-untyped-def]
    r = run_program(three.url(), TORCH, mem="3GiB", extra_env={"WOOLY_TENANT": "t-torch"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "torch ok True" in r.stdout
    # binpack: n1 (4 GiB) is the tightest node that fits 3 GiB; n3 (2 GiB) cannot take it
    ((did, node),) = placed_on(three, "t-torch")
    assert node == "n1"
    out = wooly("pool", "explain", did, env={"WOOLY_SERVER": three.url()})
    assert out.returncode == 0, out.stderr
    assert "placed on n1" in out.stdout and "rejected by memory: 1 node(s)" in out.stdout, out.stdout
    assert re.search(r"\* n1 .* fit 0\.750", out.stdout), out.stdout

    r = run_program(three.url(), NUMBA, mem="6GiB", extra_env={"WOOLY_TENANT": "t-numba"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "numba ok True" in r.stdout
    assert [n for _, n in placed_on(three, "t-numba")] == ["n2"]

    nodes = wooly("pool", "nodes", env={"WOOLY_SERVER": three.url()})
    assert nodes.returncode == 0 and all(n in nodes.stdout for n in ("n1", "n2", "n3")), nodes.stdout + nodes.stderr
    # both sides export Prometheus metrics
    ctl = scrape(three.metrics["controller"])
    assert re.search(r'wooly_pool_placements_total\{outcome="placed"\} [2-9]', ctl), ctl
    assert "wooly_pool_nodes 3.0" in ctl and "wooly_pool_leader 1.0" in ctl
    assert "wooly_pool_node_joined 1.0" in scrape(three.metrics["n1"])
    from tests.integration.hypervisor.test_observability import dashboard_series

    exported = {line.split("{")[0].split(" ")[0] for line in ctl.splitlines() if line and not line.startswith("#")}
    assert dashboard_series("wooly_pool_") <= exported  # what the Grafana dashboard plots exists


def test_a_request_that_cannot_fit_waits_with_its_reason_then_places(three) -> None:  # type: ignore[no-untyped-def]
    holder = run_program(
        three.url(), TORCH, mem="7GiB", extra_env={"WOOLY_TENANT": "t-hold", "HOLD_S": "6"}, background=True
    )
    assert wait_until(lambda: placed_on(three, "t-hold"), 60, 0.2), "the holder was never placed"
    result: dict[str, object] = {}
    waits: list[tuple[str, str]] = []

    def ask() -> None:
        c = PoolClient(three.url(), timeout_s=3)
        try:
            result["placement"] = c.place(
                PlaceRequest(tenant="t-wait", memory=6 * GiB, deadline_s=60),
                on_wait=lambda d, why: waits.append((d, why)),
            )
        except PoolError as exc:
            result["error"] = exc
        finally:
            c.close()

    t = threading.Thread(target=ask)
    t.start()
    assert wait_until(lambda: waits, 20, 0.05), "the request never reported that it waits"
    did, why = waits[0]
    assert "0/3 nodes fit" in why and "memory" in why, why
    status = three.call({"kind": "status"})
    assert status is not None and [p["decision"] for p in status["pending"]] == [did]
    text = wooly("pool", "explain", did, env={"WOOLY_SERVER": three.url()}).stdout
    assert "waiting: 0/3 nodes fit" in text and "rejected by memory: 3 node(s)" in text, text
    out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err[-3000:]
    t.join(60)
    assert "placement" in result, result
    assert result["placement"].node == "n2"  # type: ignore[attr-defined]
    final = three.call({"kind": "explain", "id": did})
    assert final is not None and final["decision"]["outcome"] == "placed" and final["decision"]["waited_s"] > 0


def test_a_request_past_its_deadline_gets_a_cuda_error(three) -> None:  # type: ignore[no-untyped-def]
    c = PoolClient(three.url(), timeout_s=3)
    with pytest.raises(PoolError) as exc:
        c.place(PlaceRequest(tenant="t-big", memory=100 * GiB, deadline_s=1.0))
    assert exc.value.name == "CUDA_ERROR_OUT_OF_MEMORY" and "memory" in str(exc.value)
    with pytest.raises(PoolError) as exc:
        c.place(PlaceRequest(tenant="t-amd", memory=GiB, vendor="amd", deadline_s=0.5))
    assert exc.value.name == "CUDA_ERROR_NO_DEVICE" and "3 vendor" in str(exc.value)
    c.close()
    # and a program gets it as its first CUDA call's error
    r = run_program(three.url(), NUMBA, mem="100GiB", extra_env={"WOOLY_PLACE_TIMEOUT_S": "1"})
    assert r.returncode != 0 and "CUDA_ERROR_OUT_OF_MEMORY" in r.stderr, r.stderr[-2000:]


def test_cordoned_node_is_skipped_and_said_so(three) -> None:  # type: ignore[no-untyped-def]
    env = {"WOOLY_SERVER": three.url()}
    assert wooly("pool", "cordon", "n3", "--reason", "disk swap", env=env).returncode == 0
    try:
        assert wait_until(lambda: "cordoned (disk swap)" in wooly("pool", "nodes", env=env).stdout, 10, 0.1)
        c = PoolClient(three.url(), timeout_s=3)
        p = c.place(PlaceRequest(tenant="t-cordon", memory=GiB // 2))
        c.close()
        assert p.node != "n3"  # binpack would pick n3 otherwise
        text = wooly("pool", "explain", p.decision, env=env).stdout
        assert "rejected by cordoned: 1 node(s)" in text and "n3: disk swap" in text, text
    finally:
        assert wooly("pool", "uncordon", "n3", env=env).returncode == 0
    bad = wooly("pool", "cordon", "no-such-node", env=env)
    assert bad.returncode == 1 and "no node 'no-such-node'" in bad.stderr


def test_doctor_checks_the_pool_and_the_node_it_is_given(three) -> None:  # type: ignore[no-untyped-def]
    out = wooly("doctor", "--no-torch", env={"WOOLY_SERVER": three.url()})
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    lines = {line[6:17].strip(): line for line in out.stdout.splitlines()}
    assert "3 node(s)" in lines["pool"] and "leader" in lines["pool"]
    assert lines["placement"].startswith("ok") and "node n" in lines["placement"]
    assert lines["connection"].startswith("ok") and lines["kernel"].startswith("ok")


def test_killed_node_leaves_within_its_ttl_and_placements_avoid_it(three) -> None:  # type: ignore[no-untyped-def]
    proc, _ = three.nodes["n3"]
    proc.proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    assert wait_until(lambda: "n3" not in three.node_names(), TTL + 5, 0.05)
    gone = time.monotonic() - t0
    print(f"node left the pool {gone:.2f} s after SIGKILL (TTL {TTL} s)")
    assert gone <= TTL + 1.0, f"n3 left the pool {gone:.2f} s after it died (TTL {TTL} s)"
    c = PoolClient(three.url(), timeout_s=3)
    p = c.place(PlaceRequest(tenant="t-after", memory=GiB // 2))  # binpack would have chosen n3
    c.close()
    assert p.node in ("n1", "n2")


def test_hostile_messages_get_cuda_errors_and_the_controller_lives(three) -> None:  # type: ignore[no-untyped-def]
    import msgpack
    import zmq

    from proto import curve
    from proto.codec import encode_body, unpack_body
    from proto.constants import VERSION_FRAME

    ep = three.controllers["a"][1]
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    curve.secure_client(sock, ep)
    sock.connect(ep)

    def ask(frames: list[bytes]) -> dict:
        sock.send_multipart(frames)
        assert sock.poll(5000), f"no answer to {frames!r:.80}"
        return unpack_body(sock.recv_multipart())[0]

    cases = [
        ([b"garbage"], "CUDA_ERROR_NOT_SUPPORTED"),
        ([VERSION_FRAME + b"\xc1"], "CUDA_ERROR_INVALID_VALUE"),
        ([VERSION_FRAME + msgpack.packb([1, 2])], "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "nope", "rid": 1}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "place", "rid": 2, "request": {"memory": -1}}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "place", "rid": 3, "request": {"vendor": "intel"}}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "place", "rid": 4, "request": {"digests": ["zz" * 8]}}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "place", "rid": 5, "request": "x"}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "explain", "rid": 6, "id": "../../leader"}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "explain", "rid": 7, "id": "0" * 16}), "CUDA_ERROR_NOT_FOUND"),
        (encode_body({"kind": "quota", "rid": 8, "tenant": "t", "bytes": "lots"}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "cordon", "rid": 9, "node": {"a": 1}}), "CUDA_ERROR_INVALID_VALUE"),
        (encode_body({"kind": "cordon", "rid": 10, "node": "nobody"}), "CUDA_ERROR_NOT_FOUND"),
        (encode_body({"kind": "nodes", "rid": 11, "extra": 1}), "CUDA_ERROR_INVALID_VALUE"),
    ]
    for frames, name in cases:
        reply = ask(frames)
        assert reply["kind"] == "error" and reply["name"] == name, (frames, reply)
    sock.close(0)
    assert three.call({"kind": "status"}, ep)["is_leader"] in (True, False)
    assert three.node_names() >= {"n1", "n2"}


def test_leader_killed_the_other_controller_places_within_a_ttl(three) -> None:  # type: ignore[no-untyped-def]
    three.controller("b", "--claim-s", "3")
    assert wait_until(lambda: len((three.call({"kind": "status"}) or {}).get("controllers", [])) == 2, 10, 0.1)
    status = three.call({"kind": "status"})
    leader_id = status["leader"]["id"]
    leader = next(
        n
        for n, (_, ep) in three.controllers.items()
        if (three.call({"kind": "status"}, ep) or {}).get("id") == leader_id
    )
    other = "b" if leader == "a" else "a"
    # a follower redirects: a client given only the follower is still placed (by the leader)
    c = PoolClient(three.url(other), timeout_s=3)
    assert c.place(PlaceRequest(tenant="t-redirect", memory=GiB // 4)).node
    c.close()
    three.controllers[leader][0].proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    assert wait_until(
        lambda: (three.call({"kind": "status"}, three.controllers[other][1]) or {}).get("is_leader"), TTL + 5, 0.05
    )
    took = time.monotonic() - t0
    print(f"follower leads {took:.2f} s after the leader's SIGKILL (TTL {TTL} s)")
    assert took <= TTL + 1.0, f"the follower took the lead {took:.2f} s after the leader died (TTL {TTL} s)"
    c = PoolClient(three.url(leader, other), timeout_s=2)  # the dead one first, as a client would have it
    p = c.place(PlaceRequest(tenant="t-failover", memory=GiB // 4))
    c.close()
    assert p.node in ("n1", "n2")
