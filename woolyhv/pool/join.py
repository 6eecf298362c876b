"""``wooly gpud --join``: check the flags and build the node agent (NOTE [node agent] in woolyhv/pool/agent.py)."""

from __future__ import annotations

import re
import socket
from typing import Any

from proto.settings import ConfigError
from woolyhv.pool.agent import NodeAgent
from woolyhv.pool.store import Store, StoreError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")


def _host_address() -> str:
    """This host's address as others see it: the source address of a route outwards, else the host name."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            return s.getsockname()[0]
    except OSError:
        return socket.gethostname()


def advertised(bound: list[str], advertise: str | None) -> str:
    from proto.settings import check_endpoint

    if advertise:
        return check_endpoint(advertise, "--advertise (WOOLY_ADVERTISE)")
    tcp = [ep for ep in bound if ep.startswith("tcp://")]
    ep = tcp[0] if tcp else bound[0]
    for wildcard in ("tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:"):
        if ep.startswith(wildcard):
            return "tcp://" + _host_address() + ":" + ep[len(wildcard) :]
    return ep


def check_join(url: str, *, node_name: str | None, ttl: int, labels: list[str]) -> tuple[str, dict[str, str]]:
    """The node's name and labels, or ConfigError naming the flag (called before gpud binds anything)."""
    from woolyhv.pool.store import parse_url

    parse_url(url, "--join (WOOLY_JOIN)")
    name = node_name or socket.gethostname()
    if not _NAME.match(name):
        raise ConfigError(f"--node-name={name!r}: expected letters, digits, '.', '_', ':' or '-' (at most 253)")
    if not 1 <= ttl <= 3600:
        raise ConfigError(f"--pool-ttl={ttl}: expected a number of seconds from 1 to 3600")
    parsed: dict[str, str] = {}
    for item in labels:
        k, sep, v = item.partition("=")
        if not sep or not _NAME.match(k) or len(v) > 253:
            raise ConfigError(f"--label={item!r}: expected KEY=VALUE, such as zone=a")
        parsed[k] = v
    return name, parsed


def agent_for(
    server: Any, url: str, *, node_name: str | None, advertise: str | None, ttl: int, labels: list[str]
) -> NodeAgent:
    from gpud import log
    from proto import curve

    name, parsed = check_join(url, node_name=node_name, ttl=ttl, labels=labels)
    store = Store(url, timeout_s=max(1.0, ttl / 3), what="--join (WOOLY_JOIN)")
    endpoint = advertised(server.bound, advertise)
    key = ""
    if endpoint.startswith("tcp://") and not server.insecure:
        key = curve.server_keys()[0].decode()
    try:
        store.ping()
    except StoreError as exc:
        log.warning("pool.etcd-unreachable", url=url, error=str(exc), detail="joining once it answers")
    return NodeAgent(store, name, endpoint, ttl=ttl, interval=min(1.0, ttl / 3), server_key=key, labels=parsed)
