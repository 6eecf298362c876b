"""The bounded disk cache of compiled kernels (NOTE [bounded disk cache], jit/disk_cache.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jit import compile_module, disk_cache
from proto.settings import ConfigError
from tests.unit.jit.helpers import HEADER

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WOOLY_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("WOOLY_JIT_CACHE", "1")
    monkeypatch.setitem(disk_cache._LEGACY, "started", True)  # no background legacy sweep unless a test asks
    return tmp_path


def key(shard: str, i: int) -> str:
    return shard + f"{i:062x}"


def age(root: Path, k: str, t: float) -> None:
    for ext in ("o", "json"):
        os.utime(root / k[:2] / f"{k}.{ext}", (t, t))


def test_entries_live_in_shards_and_round_trip(cache: Path) -> None:
    k = key("3f", 1)
    disk_cache.store(k, b"\x7fELF object", {"kernels": [{"name": "k"}]})
    assert sorted(p.name for p in (cache / "3f").iterdir()) == [f"{k}.json", f"{k}.o"]
    assert disk_cache.read(k) == (b"\x7fELF object", {"kernels": [{"name": "k"}]})
    assert disk_cache.read(key("3f", 2)) is None
    (cache / "3f" / f"{k}.o").unlink()  # half an entry is a miss, not an error
    assert disk_cache.read(k) is None


def test_least_recently_used_entries_go_first(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    budget = 10_240
    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", str(budget * disk_cache.SHARDS))
    keys = [key("00", i) for i in range(6)]
    t0 = time.time() - 1000
    for i, k in enumerate(keys[:5]):
        disk_cache.store(k, bytes(2000), {"i": i})
        age(cache, k, t0 + i)
    assert len(list((cache / "00").glob("*.o"))) == 5  # 5 x ~2 KB: within the shard's 10 KiB
    assert disk_cache.read(keys[0]) is not None  # the oldest is used again: now the most recent
    disk_cache.store(keys[5], bytes(2000), {"i": 5})  # over the share: trimmed to 80 % of it
    left = {p.stem for p in (cache / "00").glob("*.o")}
    assert left == {keys[0], keys[3], keys[4], keys[5]}
    assert {p.stem for p in (cache / "00").glob("*.json")} == left
    assert sum(p.stat().st_size for p in (cache / "00").iterdir()) <= budget * 0.8
    assert disk_cache.read(keys[1]) is None and disk_cache.read(keys[3]) == (bytes(2000), {"i": 3})


def test_shards_are_bounded_separately_and_the_new_entry_stays(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", str(1000 * disk_cache.SHARDS))
    disk_cache.store(key("a1", 1), bytes(600), {})
    disk_cache.store(key("b2", 1), bytes(600), {})
    assert disk_cache.read(key("a1", 1)) is not None  # another shard's store never touches it
    disk_cache.store(key("a1", 2), bytes(5000), {})  # bigger than the whole share: kept, the old one goes
    assert [p.stem for p in (cache / "a1").glob("*.o")] == [key("a1", 2)]
    assert disk_cache.read(key("b2", 1)) is not None


def test_zero_means_no_bound_and_a_bad_bound_is_refused(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jit.compiler as c

    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", "0")
    for i in range(5):
        disk_cache.store(key("00", i), bytes(4000), {})
    assert len(list((cache / "00").glob("*.o"))) == 5
    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", "2GiB")
    assert disk_cache.max_bytes() == 2 << 30
    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", "lots")
    with pytest.raises(ConfigError, match="^WOOLY_JIT_CACHE_MAX='lots': expected a size such as 4GiB"):
        disk_cache.max_bytes()
    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", "12 parsecs")
    with pytest.raises(ConfigError, match="'12 parsecs'"):  # at daemon start (jit.warm_up), not at a store
        c.warm_up()


def test_stale_temporaries_and_legacy_entries_are_removed(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", str(1 << 20))
    shard = cache / "00"
    shard.mkdir()
    old_tmp, new_tmp = shard / f".{key('00', 9)}.o.123.456", shard / f".{key('00', 8)}.o.123.457"
    for p in (old_tmp, new_tmp):
        p.write_bytes(b"partial")
    os.utime(old_tmp, (time.time() - 7200,) * 2)
    legacy = [cache / f"{'e' * 64}.o", cache / f"{'e' * 64}.json"]
    other = cache / "README.txt"
    for p in (*legacy, other):
        p.write_bytes(b"x")
    monkeypatch.setitem(disk_cache._LEGACY, "started", False)
    disk_cache.store(key("00", 1), b"obj", {})
    for t in __import__("threading").enumerate():
        if t.name == "wooly-jit-cache-legacy":
            t.join(10)
    assert not old_tmp.exists() and new_tmp.exists()  # a live writer's file is left alone
    assert not any(p.exists() for p in legacy) and other.exists()


def test_stats_and_clear(cache: Path) -> None:
    for i in range(3):
        disk_cache.store(key(f"{i:02x}", i), bytes(100), {"i": i})
    s = disk_cache.stats()
    assert s["entries"] == 3 and s["bytes"] == 3 * (100 + len(json.dumps({"i": 0}))) and s["dir"] == str(cache)
    assert disk_cache.clear() == 3
    assert disk_cache.stats()["entries"] == 0 and not any(cache.iterdir())


def test_compiled_modules_are_cached_within_the_bound(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: compile_module stores each optimised object in its shard; the cache never exceeds its bound
    by more than one (just stored) entry per shard; an evicted module compiles again and runs."""
    import jit.compiler as c

    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", str(256 * disk_cache.SHARDS))  # every shard keeps only its newest
    srcs = [HEADER + f".visible .entry k{i}() {{ ret; }} // bounded {time.time_ns()} {i}" for i in range(6)]
    for s in srcs:
        compile_module(s, tier="optimized")
    objs = list(cache.glob("??/*.o"))
    shards = {p.parent.name for p in objs}
    assert len(objs) == len(shards) >= 1  # one entry per shard at most
    c._MEM_CACHE.clear()
    assert compile_module(srcs[0], tier="optimized").kernel_names == ["k0"]


def test_wooly_cache_command(cache: Path) -> None:
    disk_cache.store(key("0a", 1), bytes(1000), {})
    env = dict(os.environ)
    run = [sys.executable, "-m", "woolyhv", "cache"]
    out = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    assert json.loads(out)["entries"] == 1
    out = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    assert str(cache) in out and "1 module(s)" in out and "of 1.0 GiB" in out
    out = subprocess.run([*run, "--clear"], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    assert "removed 1" in out and disk_cache.stats()["entries"] == 0
