"""The JIT's on-disk kernel cache: compiled objects and their metadata, kept across processes, bounded in size.

NOTE [bounded disk cache]
An entry is two files, ``<key>.o`` (the object) and ``<key>.json`` (its metadata), in the shard directory named by
the key's first two hex digits (256 shards): ``~/.cache/wooly/jit/3f/3f9c…e1.o`` (``WOOLY_JIT_CACHE_DIR``). A writer
writes each file under a temporary name and renames it into place, the metadata last, so a reader never sees half an
entry; a reader that finds either file missing has a miss and recompiles.

Keys hash the translator's own source (jit/compiler.py ``cache_key``), so every translator change strands the
entries of the one before: without a bound the cache only grows (692 MB on one development machine after a few days
of tests). The cache therefore holds at most ``WOOLY_JIT_CACHE_MAX`` bytes (default 1 GiB, ``0`` = no bound), split
evenly over the shards, as ccache does: after a store, its shard is scanned (1/256 of the cache: 2-5 ms at the
bound, after a compile of 20-800 ms) and, if it is over its share, the entries used longest ago are deleted until it
is under 80 % of it. A hit touches the entry's metadata file, so "used" means read or written: the bound evicts
least recently used entries, never the one just stored. Entries of the flat layout used before shards (files
directly in the cache directory) are deleted by the first store of a process, in a background thread.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from proto import settings

SHARDS = 256
_KEEP = 0.8  # a trimmed shard keeps this fraction of its share
_STALE_TMP_S = 3600.0  # a writer's temporary file older than this was left by a process that died


def enabled() -> bool:
    return settings.jit().jit_cache


def directory() -> Path:
    d = settings.jit().jit_cache_dir
    return Path(d) if d else Path.home() / ".cache" / "wooly" / "jit"


def max_bytes() -> int:
    """The bound in bytes (0: none); a value that is not a size is a ConfigError naming WOOLY_JIT_CACHE_MAX."""
    return settings.jit().jit_cache_max


def _paths(key: str) -> tuple[Path, Path]:
    shard = directory() / key[:2]
    return shard / f"{key}.o", shard / f"{key}.json"


def read(key: str) -> tuple[bytes, dict] | None:
    """The entry for ``key``, or None. A hit marks the entry as used (its metadata file's time)."""
    obj_path, meta_path = _paths(key)
    try:
        obj = obj_path.read_bytes()
        meta = json.loads(meta_path.read_bytes())
    except (OSError, ValueError):
        return None
    try:
        os.utime(meta_path)
    except OSError:
        pass  # a read-only cache still serves hits
    return obj, meta


def store(key: str, obj: bytes, meta: dict) -> None:
    """Write an entry (a full or read-only disk only costs a recompile later), then keep its shard in bounds."""
    obj_path, meta_path = _paths(key)
    try:
        obj_path.parent.mkdir(parents=True, exist_ok=True)
        for path, data in ((obj_path, obj), (meta_path, json.dumps(meta).encode())):
            tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
            tmp.write_bytes(data)
            os.replace(tmp, path)  # the metadata lands last
    except OSError:
        return
    limit = max_bytes()
    if limit:
        trim(obj_path.parent, max(1, limit // SHARDS), keep=key)
    _start_legacy_cleanup()


def _entries(shard: Path, sweep: bool = True) -> dict[str, list]:
    """key -> [bytes, last use] for the shard's entries; with ``sweep``, stale temporary files are deleted on the
    way."""
    out: dict[str, list] = {}
    now = time.time()
    try:
        it = os.scandir(shard)
    except OSError:
        return out
    with it:
        for e in it:
            name = e.name
            try:
                st = e.stat()
            except OSError:
                continue
            if name.startswith("."):
                if sweep and now - st.st_mtime > _STALE_TMP_S:
                    _unlink(Path(e.path))
                continue
            key, dot, ext = name.rpartition(".")
            if not dot or ext not in ("o", "json"):
                continue
            rec = out.setdefault(key, [0, 0.0])
            rec[0] += st.st_size
            if ext == "json" or rec[1] == 0.0:  # the metadata's time is the entry's last use
                rec[1] = st.st_mtime
    return out


def trim(shard: Path, budget: int, keep: str = "") -> int:
    """Delete the least recently used entries of ``shard`` (never ``keep``) while it holds more than ``budget``
    bytes, down to ``_KEEP`` of it. Returns the bytes freed."""
    entries = _entries(shard)
    total = sum(r[0] for r in entries.values())
    if total <= budget:
        return 0
    freed = 0
    target = int(budget * _KEEP)
    for key, (size, _) in sorted(entries.items(), key=lambda kv: kv[1][1]):
        if total - freed <= target:
            break
        if key == keep:
            continue
        for ext in ("json", "o"):  # metadata first: a reader then misses instead of pairing two generations
            _unlink(shard / f"{key}.{ext}")
        freed += size
    return freed


def _unlink(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass


_LEGACY = {"started": False}
_LEGACY_LOCK = threading.Lock()


def _start_legacy_cleanup() -> None:
    with _LEGACY_LOCK:
        if _LEGACY["started"]:
            return
        _LEGACY["started"] = True
    threading.Thread(target=remove_legacy, name="wooly-jit-cache-legacy", daemon=True).start()


def remove_legacy() -> int:
    """Delete entries of the unsharded layout (``<dir>/<64 hex>.o|.json``): no key of this version reads them."""
    n = 0
    try:
        it = os.scandir(directory())
    except OSError:
        return 0
    with it:
        for e in it:
            key, dot, ext = e.name.rpartition(".")
            if dot and ext in ("o", "json") and len(key) == 64 and e.is_file(follow_symlinks=False):
                _unlink(Path(e.path))
                n += 1
    return n


def stats() -> dict:
    """Entries, bytes and bound of the cache (``wooly cache``)."""
    d = directory()
    n = size = 0
    for i in range(SHARDS):
        for rec in _entries(d / f"{i:02x}", sweep=False).values():
            n += 1
            size += rec[0]
    return {"dir": str(d), "entries": n, "bytes": size, "max_bytes": max_bytes(), "enabled": enabled()}


def clear() -> int:
    """Delete every entry (sharded or legacy); returns how many were deleted."""
    d = directory()
    n = remove_legacy() // 2
    for i in range(SHARDS):
        shard = d / f"{i:02x}"
        for key in _entries(shard):
            for ext in ("json", "o"):
                _unlink(shard / f"{key}.{ext}")
            n += 1
        try:
            shard.rmdir()
        except OSError:
            pass
    return n
