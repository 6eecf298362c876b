"""gpud/chan.py: the broker-executor channel (NOTE [executors]). Frames keep their boundaries when they are
read in pieces or arrive with many descriptors; bulk travels inline or in memfds; what an executor sends the
broker to map must be sealed, so a hostile executor cannot make the broker fault by shrinking it."""

from __future__ import annotations

import os
import threading

import pytest

from gpud import chan


def _pair() -> tuple[chan.Conn, chan.Conn]:
    a, b = chan.pair()
    return a, chan.Conn(b)


def test_frames_round_trip_with_and_without_descriptors() -> None:
    a, b = _pair()
    a.send(["hello", 1, b"x" * 100])
    assert b.recv() == (["hello", 1, b"x" * 100], [])
    r, w = os.pipe()
    a.send({"k": [1, 2]}, [w])
    obj, fds = b.recv()
    assert obj == {"k": [1, 2]} and len(fds) == 1
    os.write(fds[0], b"ok")
    assert os.read(r, 2) == b"ok"
    for fd in (r, w, *fds):
        os.close(fd)


def test_more_descriptors_than_one_message_carries() -> None:
    a, b = _pair()
    fds = [os.memfd_create(f"t{i}") for i in range(600)]
    for i, fd in enumerate(fds):
        os.write(fd, i.to_bytes(2, "little"))
    a.send(["many"], fds)
    a.send(["next"])  # the following frame is not mixed into the first
    obj, got = b.recv()
    assert obj == ["many"] and len(got) == 600
    assert [int.from_bytes(os.pread(fd, 2, 0), "little") for fd in got] == list(range(600))
    assert b.recv() == (["next"], [])
    chan._close_all(fds + got)


def test_a_big_body_arrives_whole() -> None:
    a, b = _pair()
    body = os.urandom(3 << 20)
    t = threading.Thread(target=a.send, args=(["big", body],))
    t.start()
    assert b.recv()[0] == ["big", body]
    t.join()


def test_end_of_file_and_garbage_close_the_channel() -> None:
    a, b = _pair()
    a.sock.sendall(b"\x05\x00\x00\x00\x00\x00\x00\x00\xc1\xc1\xc1\xc1\xc1")  # 0xc1 is never valid msgpack
    with pytest.raises(chan.ChannelClosed, match="undecodable"):
        b.recv()
    a.sock.sendall((chan.MAX_BODY + 1).to_bytes(4, "little") + bytes(4))
    with pytest.raises(chan.ChannelClosed, match="oversized"):
        b.recv()
    a.close()
    with pytest.raises(chan.ChannelClosed):
        b.recv()


def test_bulk_inline_and_in_memfds() -> None:
    fds: list[int] = []
    small, big = b"s" * 100, bytes(range(256)) * 1024
    descs = chan.pack_bulk([small, memoryview(big)], fds)
    assert descs[0] == small and descs[1] == [0, len(big)] and len(fds) == 1
    out = chan.unpack_bulk(descs, fds, set())
    assert out[0] == small and bytes(out[1]) == big
    out[1][0] = 7  # the executor may adopt the pages as a tensor's storage: writable
    with pytest.raises(ValueError, match="sealed"):  # the broker maps only sealed memfds
        chan.unpack_bulk(descs, fds, set(), sealed=True)
    chan._close_all(fds)


def test_sealed_bulk_cannot_shrink_under_the_reader() -> None:
    fds: list[int] = []
    descs = chan.pack_bulk([b"z" * (1 << 20)], fds, seal=True)
    with pytest.raises(PermissionError):
        os.ftruncate(fds[0], 10)  # what a hostile executor would do to make the broker fault
    out = chan.unpack_bulk(descs, fds, set(), sealed=True)
    assert bytes(out[0][:3]) == b"zzz"
    chan._close_all(fds)


@pytest.mark.parametrize("desc", [[5, 10], [0, 0], [0, -1], ["a", 1], [0, 1 << 40], "x"])
def test_bad_bulk_descriptors_are_refused(desc: object) -> None:
    fds = [chan.memfd_with(b"abc" * 30000)]
    with pytest.raises(ValueError):
        chan.unpack_bulk([desc], fds, set())
    chan._close_all(fds)
