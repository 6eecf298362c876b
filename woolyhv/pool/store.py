"""The pool's store: etcd v3, reached through its gRPC gateway with ``etcd3gw``.

NOTE [etcd client]: etcd3gw (OpenStack, maintained, pure Python over ``requests``) speaks etcd's JSON gateway
(``/v3/kv/range``, ``/v3/kv/txn``, ``/v3/lease/*``, ``/v3/watch``), which every etcd >= 3.4 serves on its client
port. The alternatives need gRPC: ``aetcd`` pulls grpcio (a large native wheel, asyncio-only API) and the
``etcd3`` package is unmaintained. Every call here is one HTTP request on a kept-alive connection (about 1-2 ms on
loopback, measured in benchmarks/pool.py). Two pieces are our own, each a few lines over the gateway:

- **watch**: etcd3gw's watcher ends silently when its stream breaks and splits JSON at chunk boundaries; ours
  reads whole lines, resumes from the last revision it saw after a break, and resynchronises (full read) when
  etcd compacted that revision away;
- **values**: JSON documents; revisions and lease ids come back from the gateway as decimal strings and are
  turned into ints here, so the rest of the pool never sees the gateway's encoding.

Keys live under one prefix (default ``/wooly/pool/``); the layout is in NOTE [pool keys] (woolyhv/pool/__init__.py).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import requests

from proto import settings
from proto.settings import ConfigError

DEFAULT_PREFIX = "/wooly/pool/"


class StoreError(RuntimeError):
    """etcd refused a request or could not be reached: one line saying which and why."""


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _range_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return _b64(bytes(raw))


@dataclass(frozen=True)
class KV:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    def json(self) -> Any:
        return json.loads(self.value)


def _kv(raw: dict[str, Any]) -> KV:
    return KV(
        key=_unb64(raw.get("key")).decode(),
        value=_unb64(raw.get("value")),
        create_revision=int(raw.get("create_revision", 0)),
        mod_revision=int(raw.get("mod_revision", 0)),
        version=int(raw.get("version", 0)),
        lease=int(raw.get("lease", 0)),
    )


def parse_url(url: str, what: str = "--etcd") -> tuple[str, int, str]:
    """``etcd://host:2379``, ``http://host:2379`` or ``https://host:2379`` -> (host, port, protocol); ConfigError
    naming ``what`` otherwise. https takes its CA and client certificate from WOOLY_ETCD_CA, WOOLY_ETCD_CERT and
    WOOLY_ETCD_KEY (etcd's --trusted-ca-file / --client-cert-auth)."""
    u = urlparse(url if "://" in url else "etcd://" + url)
    try:
        port = u.port or 2379
    except ValueError:
        port = 0
    if u.scheme not in ("etcd", "http", "https") or not u.hostname or not 0 < port < 65536 or u.path not in ("", "/"):
        raise ConfigError(
            f"{what}={url!r}: expected etcd's client URL, such as etcd://127.0.0.1:2379 or https://etcd:2379"
        )
    return u.hostname, port, "https" if u.scheme == "https" else "http"


def _tls(session: requests.Session) -> None:
    s = settings.gpud()
    ca, cert, key = s.etcd_ca, s.etcd_cert, s.etcd_key
    if ca:
        session.verify = ca
    if cert and key:
        session.cert = (cert, key)


class Store:
    """One etcd endpoint and a key prefix. Thread-safe: each thread gets its own HTTP session."""

    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX, timeout_s: float = 5.0, what: str = "--etcd") -> None:
        import etcd3gw

        self.url = url
        self.host, self.port, self.protocol = parse_url(url, what)
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.timeout_s = timeout_s
        self._etcd3gw = etcd3gw
        self._local = threading.local()

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self) -> Any:
        c = getattr(self._local, "client", None)
        if c is None:
            session = requests.Session()
            session.trust_env = False  # etcd is reached directly: no proxy lookups in the environment per call
            _tls(session)
            c = self._local.client = self._etcd3gw.Etcd3Client(
                host=self.host,
                port=self.port,
                timeout=self.timeout_s,
                protocol=self.protocol,
                api_path="/v3/",
                session=session,
            )
        return c

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.client.post(self.client.get_url(path), json=body)
        except self._etcd3gw.exceptions.Etcd3Exception as exc:
            detail = getattr(exc, "detail_text", "") or str(exc)
            raise StoreError(
                f"etcd at {self.host}:{self.port}: {path}: {' '.join(str(detail).split())[:300]}"
            ) from None
        except requests.RequestException as exc:
            raise StoreError(f"etcd at {self.host}:{self.port}: {path}: {exc}") from None

    def key(self, *parts: str) -> str:
        return self.prefix + "/".join(parts)

    def ping(self) -> int:
        """etcd's current revision (raises StoreError when etcd does not answer)."""
        return int(self._post("/maintenance/status", {}).get("header", {}).get("revision", 0))

    # ------------------------------------------------------------------ keys
    def get(self, key: str) -> KV | None:
        kvs = self._post("/kv/range", {"key": _b64(key)}).get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        """Every key under ``prefix`` and the store revision they were read at."""
        r = self._post("/kv/range", {"key": _b64(prefix), "range_end": _range_end(prefix)})
        return [_kv(x) for x in r.get("kvs") or []], int(r.get("header", {}).get("revision", 0))

    def put(self, key: str, value: Any, lease: int = 0) -> int:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(_dump(value))}
        if lease:
            body["lease"] = str(lease)
        return int(self._post("/kv/put", body).get("header", {}).get("revision", 0))

    def delete(self, key: str) -> int:
        return int(self._post("/kv/deleterange", {"key": _b64(key)}).get("deleted", 0))

    def txn(
        self, compare: list[dict[str, Any]], success: list[dict[str, Any]], failure: list[dict[str, Any]] | None = None
    ) -> tuple[bool, int, list[dict[str, Any]]]:
        """One transaction: (succeeded, revision, responses). Build its parts with the helpers below."""
        r = self._post("/kv/txn", {"compare": compare, "success": success, "failure": failure or []})
        return bool(r.get("succeeded")), int(r.get("header", {}).get("revision", 0)), r.get("responses") or []

    # ------------------------------------------------------------------ leases
    def grant(self, ttl: int) -> int:
        return int(self._post("/lease/grant", {"TTL": str(int(ttl)), "ID": "0"})["ID"])

    def keepalive(self, lease: int) -> int:
        """The lease's TTL after the refresh; 0 once etcd no longer knows the lease (it expired)."""
        r = self._post("/lease/keepalive", {"ID": str(lease)})
        return int(r.get("result", {}).get("TTL", 0) or 0)

    def revoke(self, lease: int) -> None:
        try:
            self._post("/lease/revoke", {"ID": str(lease)})
        except StoreError:
            pass  # already gone

    # ------------------------------------------------------------------ watch
    def watch(
        self,
        prefix: str,
        start_revision: int,
        on_events: Callable[[list[tuple[str, KV]]], None],
        on_resync: Callable[[], int],
        stop: threading.Event,
    ) -> threading.Thread:
        """Call ``on_events([(\"PUT\"|\"DELETE\", kv), ...])`` for every change under ``prefix`` after
        ``start_revision``, on a thread of its own, until ``stop`` is set. After a broken stream it resumes where it
        was; when etcd compacted that history away it calls ``on_resync()`` (which reads everything again and
        returns the revision it read at) and goes on from there."""
        t = threading.Thread(
            target=self._watch_loop,
            args=(prefix, start_revision, on_events, on_resync, stop),
            name=f"etcd-watch {prefix}",
            daemon=True,
        )
        t.start()
        return t

    def _watch_loop(
        self,
        prefix: str,
        revision: int,
        on_events: Callable[[list[tuple[str, KV]]], None],
        on_resync: Callable[[], int],
        stop: threading.Event,
    ) -> None:
        session = requests.Session()
        session.trust_env = False
        _tls(session)
        url = f"{self.protocol}://{self.host}:{self.port}/v3/watch"
        while not stop.is_set():
            body = {
                "create_request": {
                    "key": _b64(prefix),
                    "range_end": _range_end(prefix),
                    "start_revision": str(revision + 1),
                    "progress_notify": True,
                }
            }
            try:
                with session.post(url, json=body, stream=True, timeout=(self.timeout_s, None)) as resp:
                    closer = threading.Thread(target=_close_on, args=(stop, resp), daemon=True)
                    closer.start()
                    for line in resp.iter_lines():
                        if stop.is_set():
                            return
                        if not line.strip():
                            continue
                        result = json.loads(line).get("result") or {}
                        if int(result.get("compact_revision", 0) or 0) > 0:
                            revision = on_resync()
                            break
                        events = []
                        for ev in result.get("events") or []:
                            kv = _kv(ev.get("kv") or {})
                            events.append((ev.get("type", "PUT"), kv))
                            revision = max(revision, kv.mod_revision)
                        if events:
                            on_events(events)
                        hdr = int(result.get("header", {}).get("revision", 0) or 0)
                        if not result.get("events") and hdr > revision and not result.get("created"):
                            revision = hdr  # a progress notification: nothing happened before hdr
            except (requests.RequestException, ValueError, OSError, AttributeError):
                pass
            if not stop.is_set():
                stop.wait(0.2)


def _close_on(stop: threading.Event, resp: requests.Response) -> None:
    """Break a blocked watch read once ``stop`` is set (a streaming response has no other way out)."""
    while not stop.wait(0.5):
        if resp.raw is None or resp.raw.closed:
            return
    try:
        sock = socket.fromfd(resp.raw.fileno(), socket.AF_INET, socket.SOCK_STREAM)
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    except (OSError, ValueError, AttributeError):
        pass


def _dump(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if hasattr(value, "model_dump_json"):
        return value.model_dump_json().encode()
    return json.dumps(value, separators=(",", ":")).encode()


# ---------------------------------------------------------------------- transaction parts
def cmp_mod(key: str, revision: int) -> dict[str, Any]:
    """The key was last written at ``revision`` (0: the key does not exist)."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def cmp_create(key: str, revision: int) -> dict[str, Any]:
    """The key was created at ``revision`` (0: it does not exist)."""
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(revision)}


def cmp_lease(key: str, lease: int) -> dict[str, Any]:
    """The key is attached to ``lease``."""
    return {"key": _b64(key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)}


def op_put(key: str, value: Any, lease: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key), "value": _b64(_dump(value))}
    if lease:
        body["lease"] = str(lease)
    return {"request_put": body}


def op_get(key: str) -> dict[str, Any]:
    return {"request_range": {"key": _b64(key)}}


def op_delete(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": _b64(key)}}


def range_kvs(response: dict[str, Any]) -> list[KV]:
    """The key-values of one ``op_get`` response in a transaction's answer."""
    return [_kv(x) for x in (response.get("response_range") or {}).get("kvs") or []]


def wait_for(store: Store, timeout_s: float) -> None:
    """Block until etcd answers (StoreError after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            store.ping()
            return
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
