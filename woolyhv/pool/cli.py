"""The pool's commands: ``wooly controller``, ``wooly pool nodes|sessions|explain|cordon|uncordon|quota|status``,
``wooly estimate``. Registered on the ``wooly`` app by woolyhv/cli.py."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer

from proto.settings import ConfigError
from proto.sizes import human as _human
from woolyhv.pool import protocol as P

pool_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The pool: nodes, sessions, placement decisions (through a controller).",
)

PoolOpt = Annotated[
    str, typer.Option("--pool", envvar="WOOLY_SERVER", help="the controller(s): pool://HOST:PORT[,HOST:PORT]")
]
TokenOpt = Annotated[
    str,
    typer.Option(envvar="WOOLY_ADMIN_TOKEN", show_default=False, help="the controller's admin token, where it has one"),
]


def _call(pool: str, req: P.Request, token: str = "") -> dict[str, Any]:
    from woolyhv.pool.client import PoolClient, PoolError

    if not pool.startswith("pool://"):
        raise ConfigError(f"--pool (WOOLY_SERVER)={pool!r}: expected pool://HOST:PORT (the pool's controller)")
    client = PoolClient(pool, token=token)
    try:
        return client.call(req)
    except PoolError as exc:
        typer.echo(f"wooly pool: {exc.name}: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        client.close()


def _printed_json(reply: dict[str, Any], as_json: bool) -> bool:
    if as_json:
        typer.echo(json.dumps(reply, indent=2))
    return as_json


@pool_app.command()
def nodes(pool: PoolOpt = "", as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The nodes in the pool: devices, free memory, sessions, load, cordons."""
    r = _call(pool, P.Nodes())
    if _printed_json(r, as_json):
        return
    typer.echo(
        f"{'node':20}  {'endpoint':28}  {'devices':24}  {'free':>10}  {'total':>10}  {'sess':>4}  {'resv':>4}  {'load':>5}  state"
    )
    for n in r["nodes"]:
        devs = ",".join(f"{d['vendor']}:{d['arch']}" for d in n["devices"])
        free = max((d["free"] for d in n["devices"]), default=0)
        total = sum(d["total"] for d in n["devices"])
        state = f"cordoned ({n['cordon']})" if n["cordon"] else "ready"
        typer.echo(
            f"{n['node'][:20]:20}  {n['endpoint'][:28]:28}  {devs[:24]:24}  {_human(max(free, 0)):>10}  {_human(total):>10}"
            f"  {n['sessions']:>4}  {n['reservations']:>4}  {n['load']:>5.2f}  {state}"
        )
    for key, why in r.get("ignored", {}).items():
        typer.echo(f"ignored {key}: {why}")


@pool_app.command()
def sessions(pool: PoolOpt = "", as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every session in the pool, with its node (and reservations not yet claimed)."""
    r = _call(pool, P.Sessions())
    if _printed_json(r, as_json):
        return
    import time

    typer.echo(
        f"{'node':20}  {'session':12}  {'tenant':12}  {'memory':>10}  {'reservation':16}  {'age':>8}  "
        f"{'moves':>5}  {'checkpoint':24}  program"
    )
    now = time.time()
    for s in r["sessions"]:
        typer.echo(
            f"{s['node'][:20]:20}  {s['session'][:12]:12}  {s['tenant'][:12]:12}  {_human(s['memory']):>10}  "
            f"{(s.get('reservation') or '-')[:16]:16}  {s.get('age_s', 0):>7.1f}s  {s.get('moves', 0):>5}  "
            f"{_checkpoint(s, now):24}  {s.get('program', '')[:40]}"
        )


def _checkpoint(row: dict, now: float) -> str:
    """'3.2s ago -> n2' (the last checkpoint and its standby), 'none yet (every 10s)', or '-' (no policy)."""
    ck, every = row.get("checkpoint") or {}, row.get("checkpoint_s") or 0
    if not every:
        return "-"
    if not ck:
        return f"none yet (every {every:g}s)"
    return f"{max(0.0, now - float(ck.get('at', now))):.1f}s ago -> {ck.get('standby', '?')}"[:24]


@pool_app.command()
def explain(
    decision: Annotated[
        str, typer.Argument(help="a decision id (printed by waits and errors, in the controller's log)")
    ],
    pool: PoolOpt = "",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Why a placement went where it went (or waits): candidates, scores, the filter that rejected each node."""
    from woolyhv.pool.placement import explain as render

    r = _call(pool, P.Explain(id=decision))
    typer.echo(json.dumps(r["decision"], indent=2) if as_json else render(r["decision"]))


@pool_app.command()
def cordon(
    node: str,
    reason: Annotated[str, typer.Option(help="why (shown in explanations)")] = "maintenance",
    and_drain: Annotated[
        bool, typer.Option("--drain", help="and move its sessions off, live (as `wooly pool drain --no-wait`)")
    ] = False,
    pool: PoolOpt = "",
    token: TokenOpt = "",
) -> None:
    """Take a node out of placement (its sessions keep running, or with --drain move to other nodes)."""
    if and_drain:
        r = _call(pool, P.Drain(node=node, reason=reason), token)
        typer.echo(
            f"{node} cordoned and draining: {len(r['sessions'])} session(s) to move (wooly pool drain {node} "
            "follows them)"
        )
        return
    _call(pool, P.Cordon(node=node, reason=reason), token)
    typer.echo(f"{node} cordoned: {reason}")


@pool_app.command()
def drain(
    node: str,
    reason: Annotated[str, typer.Option(help="why (shown in explanations)")] = "maintenance",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="follow the moves until the node is empty")] = True,
    timeout: Annotated[float, typer.Option(help="seconds to follow the moves (0: no limit)")] = 600.0,
    pool: PoolOpt = "",
    token: TokenOpt = "",
) -> None:
    """Move every session off a node, live, to nodes the controller chooses (NOTE [drain]); the node is cordoned.
    Each session moves at its next call; the program sees a pause. Exits 0 once the node is empty, 1 at --timeout
    with the sessions that stay and why."""
    import time

    r = _call(pool, P.Drain(node=node, reason=reason), token)
    typer.echo(f"draining {node}: {len(r['sessions'])} session(s)")
    if not wait:
        return
    deadline = time.monotonic() + timeout if timeout > 0 else float("inf")
    said: dict[str, str] = {}
    while True:
        for o in r["orders"]:
            line = f"{o['session']} ({o['tenant']}) -> {o['target']}" + (
                f": failed: {o['error']}" if o["state"] == "failed" else f" (decision {o['decision']})"
            )
            if said.get(o["session"]) != line:
                typer.echo("  " + line)
                said[o["session"]] = line
        for sid, why in r["waiting"].items():
            line = f"{sid} stays for now: {why}"
            if said.get(sid) != line:
                typer.echo("  " + line)
                said[sid] = line
        if not r["sessions"] or not r["in_pool"]:
            typer.echo(f"{node} is drained: no sessions left" if r["in_pool"] else f"{node} left the pool")
            return
        if time.monotonic() > deadline:
            typer.echo(
                f"wooly pool drain: {node} still has {len(r['sessions'])} session(s) after {timeout:g} s "
                "(a session moves at its next call; see the lines above)",
                err=True,
            )
            raise typer.Exit(1)
        time.sleep(0.5)
        r = _call(pool, P.Drain(node=node, status=True), token)


@pool_app.command()
def uncordon(node: str, pool: PoolOpt = "", token: TokenOpt = "") -> None:
    """Put a cordoned (or drained) node back into placement."""
    _call(pool, P.Uncordon(node=node), token)
    typer.echo(f"{node} uncordoned")


@pool_app.command()
def quota(
    tenant: str,
    size: Annotated[str, typer.Argument(help="memory across the pool (8GiB); 'none' removes the quota")],
    pool: PoolOpt = "",
    token: TokenOpt = "",
) -> None:
    """Set a tenant's memory quota across the whole pool."""
    from proto.sizes import parse_bytes

    if size == "none":
        value = None
    else:
        try:
            value = parse_bytes(size, "8GiB, 512MiB")
        except ValueError:
            raise ConfigError(f"SIZE={size!r}: expected a size such as 8GiB, or none") from None
    _call(pool, P.Quota(tenant=tenant, bytes=value), token)
    typer.echo(f"{tenant}: pool quota {'removed' if value is None else _human(value)}")


@pool_app.command()
def status(pool: PoolOpt = "", as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The controllers, the leader, waiting requests and counters."""
    r = _call(pool, P.Status())
    if _printed_json(r, as_json):
        return
    leader = (r.get("leader") or {}).get("id", "none")
    typer.echo(
        f"controller {r['id']} ({'leader' if r['is_leader'] else 'follower'}); leader {leader}; "
        f"{r['nodes']} node(s); policy {r['policy']}"
    )
    for c in r["controllers"]:
        typer.echo(f"  controller {c['id']} at {c['endpoint']}")
    typer.echo("  " + ", ".join(f"{k} {v}" for k, v in r["stats"].items()))
    for p in r["pending"]:
        typer.echo(
            f"  waiting {p['decision']}: tenant {p['tenant']} {_human(p['memory'])} for {p['waited_s']:.1f}s: {p['reason']}"
        )


def controller(
    etcd: Annotated[
        str, typer.Option(envvar="WOOLY_ETCD", help="the pool's etcd: etcd://HOST:2379")
    ] = "etcd://127.0.0.1:2379",
    listen: Annotated[str, typer.Option(help="endpoint clients ask for placements on")] = "tcp://0.0.0.0:7000",
    advertise: Annotated[
        str | None,
        typer.Option(
            envvar="WOOLY_ADVERTISE",
            help="endpoint other controllers redirect clients to (default: the listener, 0.0.0.0 replaced by this host's address)",
        ),
    ] = None,
    policy: Annotated[str, typer.Option(help="binpack (fill nodes) or spread (balance them)")] = "binpack",
    ttl: Annotated[int, typer.Option(help="seconds a silent leader keeps the lead")] = 5,
    metrics_port: Annotated[int, typer.Option(help="serve Prometheus metrics on this port (0 = off)")] = 0,
    insecure: Annotated[bool, typer.Option("--insecure", help="speak in clear on tcp (no CURVE)")] = False,
    admin_token: Annotated[
        str | None,
        typer.Option(envvar="WOOLY_ADMIN_TOKEN", show_default=False, help="token cordon/uncordon/quota need"),
    ] = None,
    claim_s: Annotated[
        float, typer.Option(help="seconds a client has to connect to its node before its reservation lapses")
    ] = 60.0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Run a pool controller: places sessions on the pool's nodes (stateless beside etcd; run several)."""
    import logging
    import sys

    from proto.settings import check_endpoint
    from woolyhv.pool.controller import Controller
    from woolyhv.pool.join import advertised
    from woolyhv.pool.store import Store, StoreError, wait_for

    check_endpoint(listen, "--listen", listen=True)
    if not 1 <= ttl <= 3600:
        raise ConfigError(f"--ttl={ttl}: expected a number of seconds from 1 to 3600")
    if not 0 <= metrics_port < 65536:
        raise ConfigError(f"--metrics-port={metrics_port}: expected a port number (0 = off)")
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"--log-level={log_level!r}: expected one of debug, info, warning, error")
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    store = Store(etcd, timeout_s=max(1.0, ttl / 3))
    try:
        wait_for(store, 30.0)
    except StoreError as exc:
        raise ConfigError(f"--etcd={etcd}: etcd does not answer ({exc})") from None
    try:
        ctl = Controller(
            store,
            listen,
            policy=policy,
            ttl=ttl,
            insecure=insecure,
            admin_token=admin_token or "",
            metrics_port=metrics_port,
            claim_s=claim_s,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    ctl.advertise = advertised([ctl.endpoint], advertise)
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: ctl.stop())
    ctl.serve_forever()


def estimate(
    path: Annotated[str, typer.Argument(help="a checkpoint: a directory, config.json, *.safetensors or its index")],
    context: Annotated[int, typer.Option(help="tokens of KV cache (inference)")] = 4096,
    batch: Annotated[int, typer.Option(help="sequences at once (KV cache)")] = 1,
    training: Annotated[bool, typer.Option("--training", help="add gradients and Adam state")] = False,
    dtype: Annotated[str | None, typer.Option(help="weights' dtype at run time (default: the checkpoint's)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """How much device memory a model needs: weights, KV cache, training state (what WOOLY_MODEL places with)."""
    from woolyhv.pool.estimate import EstimateError
    from woolyhv.pool.estimate import estimate as run_estimate

    try:
        est = run_estimate(path, context=context, batch=batch, training=training, dtype=dtype, sample=False)
    except EstimateError as exc:
        raise ConfigError(f"PATH={path!r}: {exc}") from None
    if as_json:
        typer.echo(json.dumps(est, indent=2))
        return
    typer.echo(
        f"{os.path.basename(os.path.abspath(path))}: {est['params'] / 1e6:.1f} M parameters "
        f"({est['source']}), weights {est['dtype']}"
    )
    for k in ("weights", "kv_cache", "gradients", "optimizer", "activations", "overhead"):
        if est.get(k):
            typer.echo(f"  {k:12} {_human(est[k]):>10}")
    typer.echo(f"  {'total':12} {_human(est['total']):>10}   (WOOLY_MEM={est['total'] >> 20}MiB)")
