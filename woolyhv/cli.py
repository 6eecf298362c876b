"""The ``wooly`` command."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer

from proto.sizes import human as _human

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="woolyhv: run CUDA programs on a remote (or embedded) gpud."
)


def _make_backends(kind: str, cpu_memory: int, bounds_check: bool = True, cpu_devices: int = 1):
    from gpud.backends.cpu import CpuBackend
    from proto.settings import ConfigError

    if kind in ("auto", "cpu"):
        if kind == "auto":
            from gpud import discovery, log

            nv, nv_note = discovery.nvidia()
            am, am_note = discovery.amd()
            if nv:
                try:
                    from gpud.backends import nvidia

                    devs = nvidia.available()
                    if devs:
                        log.event("gpud.backend", chosen="nvidia", why=f"NVML sees {len(nv)} device(s), {nv_note}")
                        return devs
                except ImportError as exc:
                    nv_note = f"NVML sees {len(nv)} device(s) but the NVIDIA backend cannot load ({exc})"
            if am:
                am_note = f"amdsmi sees {len(am)} device(s), but gpud has no ROCm execution backend yet"
            log.event("gpud.backend", chosen="cpu", why=f"nvidia: {nv_note}; amd: {am_note}")
        # --cpu-devices N: N devices on the host's cores (NOTE [session devices]), the host's memory split among them
        each = cpu_memory or (_host_memory() // cpu_devices if cpu_devices > 1 else 0)
        return [CpuBackend(i, memory_bytes=each or None, bounds_check=bounds_check) for i in range(cpu_devices)]
    if kind == "nvidia":
        from gpud.backends import nvidia

        devs = nvidia.available()
        if not devs:
            raise ConfigError("--backend=nvidia: no NVIDIA device found on this machine")
        return devs
    raise ConfigError(f"--backend={kind!r}: expected one of auto, cpu, nvidia")


def _host_memory() -> int:
    from gpud.backends.cpu import _host_memory_bytes

    return _host_memory_bytes()


@app.command()
def gpud(
    listen: Annotated[list[str], typer.Option(help="endpoint(s) to bind: tcp://0.0.0.0:5555, ipc:///path")] = [  # noqa: B006
        "tcp://127.0.0.1:5555"
    ],
    backend: Annotated[str, typer.Option(help="auto, cpu or nvidia")] = "auto",
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
    owner_pid: Annotated[int | None, typer.Option(help="exit when this process exits (embedded mode)")] = None,
    cpu_memory: Annotated[int, typer.Option(help="bytes each CPU device offers (0 = host RAM, split among them)")] = 0,
    cpu_devices: Annotated[int, typer.Option(help="CPU backend: devices to offer (sessions are spread over them)")] = 1,
    config: Annotated[
        str | None, typer.Option(help="hypervisor config file (TOML or YAML): tenants, quotas ...")
    ] = None,
    tenant: Annotated[
        list[str], typer.Option(help="tenant policy, repeatable: name:quota=2GiB,weight=3,priority=4")
    ] = [],  # noqa: B006
    metrics_port: Annotated[int | None, typer.Option(help="serve Prometheus metrics on this port (0 = off)")] = None,
    metrics_addr: Annotated[
        str | None,
        typer.Option(
            help="address the metrics listen on (default 127.0.0.1; 0.0.0.0 for a scraper on another host: the metrics name tenants)"
        ),
    ] = None,
    scheduler: Annotated[
        bool | None, typer.Option("--scheduler/--no-scheduler", help="weighted fair device scheduling")
    ] = None,
    overcommit_ratio: Annotated[
        float | None, typer.Option(help="tenants' memory may total this times the device")
    ] = None,
    admin_token: Annotated[
        str | None,
        typer.Option(
            envvar="WOOLY_ADMIN_TOKEN",
            show_default=False,
            help="token admin calls (wooly ps) must carry; prefer the environment variable to the flag",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure", help="tcp listeners speak in clear (no CURVE): tokens and tensors are readable on the network"
        ),
    ] = False,
    executors: Annotated[
        bool | None,
        typer.Option(
            "--executors/--no-executors",
            help="run each tenant's ATen ops in a process of its own (default: the config's [aten] executors, on)",
        ),
    ] = None,
    bounds_check: Annotated[
        bool,
        typer.Option(
            "--bounds-check/--no-bounds-check",
            help="CPU backend: check every global access of a kernel against the launching session's memory (CUDA_ERROR_ILLEGAL_ADDRESS instead of touching another tenant's data)",
        ),
    ] = True,
    join: Annotated[
        str | None, typer.Option(envvar="WOOLY_JOIN", help="join the pool whose etcd is here: etcd://HOST:2379")
    ] = None,
    node_name: Annotated[
        str | None, typer.Option(envvar="WOOLY_NODE_NAME", help="this node's name in the pool (default: the host name)")
    ] = None,
    advertise: Annotated[
        str | None,
        typer.Option(
            envvar="WOOLY_ADVERTISE",
            help="endpoint clients of the pool use to reach this gpud (default: the tcp listener, 0.0.0.0 replaced by this host's address)",
        ),
    ] = None,
    pool_ttl: Annotated[
        int, typer.Option(help="seconds after which a silent node leaves the pool (its etcd lease)")
    ] = 5,
    label: Annotated[list[str], typer.Option(help="node label for the pool, repeatable: zone=a")] = [],  # noqa: B006
) -> None:
    """Run the gpud daemon."""
    import faulthandler

    from proto import settings

    settings.jit()  # NOTE [settings]: every variable gpud reads is checked before it starts
    torch_path = settings.gpud().torch_path
    if torch_path:  # NOTE [one image, one torch] (containers/build.py): the vendor's torch build, mounted
        sys.path.insert(0, torch_path)

    faulthandler.enable()  # a fault in native code (a kernel, a vendor library) leaves its Python stack on stderr
    from gpud import log
    from gpud.hypervisor.policy import load as load_policy
    from gpud.server import ListenError, Server
    from proto.settings import ConfigError, check_endpoint

    for ep in listen:
        check_endpoint(ep, "--listen", listen=True)
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"--log-level={log_level!r}: expected one of debug, info, warning, error")
    if cpu_memory < 0:
        raise ConfigError(f"--cpu-memory={cpu_memory}: expected a number of bytes >= 0 (0: the host's memory)")
    if not 1 <= cpu_devices <= 64:
        raise ConfigError(f"--cpu-devices={cpu_devices}: expected a whole number of devices from 1 to 64")
    if cpu_devices > 1 and backend == "nvidia":
        raise ConfigError(f"--cpu-devices={cpu_devices}: only the CPU backend has devices to choose the number of")

    if join:  # the pool's flags are checked before anything is bound
        from woolyhv.pool.join import check_join

        check_join(join, node_name=node_name, ttl=pool_ttl, labels=label)
        if advertise:
            check_endpoint(advertise, "--advertise (WOOLY_ADVERTISE)")
    log.setup(log_level)
    overrides: dict[str, object] = {}
    if overcommit_ratio is not None:
        overrides["overcommit_ratio"] = overcommit_ratio
    if admin_token:
        overrides["admin_token"] = admin_token
    if metrics_addr is not None:
        import ipaddress

        try:
            ipaddress.ip_address(metrics_addr)
        except ValueError:
            raise ConfigError(
                f"--metrics-addr={metrics_addr!r}: expected an IP address (127.0.0.1, 0.0.0.0, ::)"
            ) from None
        overrides["metrics_addr"] = metrics_addr
    try:
        hv_config = load_policy(config, tenant_specs=tenant, metrics_port=metrics_port, overrides=overrides)
    except (OSError, ValueError) as exc:
        where = f"--config {config}" if config else "--tenant"
        raise ConfigError(f"{where}: {' '.join(str(exc).split())}") from None
    if scheduler is not None:
        hv_config.scheduler.enabled = scheduler
    if executors is not None:
        if not executors and hv_config.aten.permit_unsafe:
            raise ConfigError(
                "--no-executors: the config's [aten] permit_unsafe needs executors (without them an "
                "unsafe op reads other tenants' memory)"
            )
        hv_config.aten.executors = executors
    try:
        server = Server(
            listen,
            _make_backends(backend, cpu_memory, bounds_check, cpu_devices),
            hypervisor=hv_config,
            insecure=insecure,
        )
    except ListenError as exc:
        raise ConfigError(str(exc)) from None
    if join:
        from woolyhv.pool.join import agent_for

        server.join_pool(agent_for(server, join, node_name=node_name, advertise=advertise, ttl=pool_ttl, labels=label))
    if hv_config.aten.sandbox:
        from gpud.sandbox import protect_daemon

        protect_daemon()  # NOTE [executor sandbox]: gpud's memory and environ are no same-uid process's to read
    server.install_signal_handlers()
    server.serve_forever(owner_pid=owner_pid)


@app.command()
def devices(
    server: Annotated[str, typer.Option(envvar="WOOLY_SERVER", help="gpud endpoint; empty = this machine")] = "",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List the devices of a gpud (or of this machine)."""
    if server:
        from proto.settings import check_endpoint

        check_endpoint(server, "--server (WOOLY_SERVER)")
        from shim.client import Connection

        conn = Connection(server, program="wooly devices")
        devs = [
            {
                "backend": d["backend"],
                "index": d["ordinal"],
                "name": d["name"],
                "total_mem": d["total_mem"],
                "detail": f"sm_{d['compute_capability'][0]}{d['compute_capability'][1]}",
            }
            for d in conn.node_devices
        ]
        conn.close()
        result = {"server": server, "devices": devs}
    else:
        from gpud.discovery import discover

        result = discover()
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(f"{'#':>2}  {'backend':7}  {'memory':>10}  name")
    for d in result["devices"]:
        typer.echo(
            f"{d['index']:>2}  {d['backend']:7}  {_human(d['total_mem']):>10}  {d['name']}  {d.get('detail', '')}"
        )
    for k, v in result.get("notes", {}).items():
        typer.echo(f"    {k}: {v}")


@app.command()
def keys(
    client: Annotated[
        str,
        typer.Option(
            "--client",
            help="make a client key pair NAME instead (for WOOLY_CLIENT_KEY); prints its file and public key",
        ),
    ] = "",
) -> None:
    """Print gpud's public CURVE key, creating the key pair on first use (proto/curve.py): clients on other
    hosts need it as WOOLY_SERVER_KEY. With --client NAME: a client key pair to bind to a tenant (its config's
    ``keys``)."""
    from proto import curve

    if client:
        from proto.settings import ConfigError

        try:
            path, public = curve.make_client_keys(client)
        except FileExistsError:
            raise ConfigError(f"--client {client}: a client key of that name exists already") from None
        except ValueError as exc:
            raise ConfigError(f"--client: {exc}") from None
        typer.echo(f"{path}\n{public.decode()}")
        typer.echo(
            f'# export WOOLY_CLIENT_KEY={path}; in gpud\'s config: [tenants.NAME] keys = ["{public.decode()}"]',
            err=True,
        )
        return
    public, _ = curve.server_keys()
    typer.echo(public.decode())


@app.command()
def ps(
    server: Annotated[
        str, typer.Option(envvar="WOOLY_SERVER", help="gpud endpoint, or pool://HOST:PORT (a controller)")
    ] = "tcp://127.0.0.1:5555",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    admin_token: Annotated[
        str, typer.Option(envvar="WOOLY_ADMIN_TOKEN", show_default=False, help="gpud's admin token, where it has one")
    ] = "",
    pool: Annotated[
        bool, typer.Option("--pool", help="every session in the pool (WOOLY_SERVER names its controller)")
    ] = False,
) -> None:
    """List a gpud's live sessions (an admin call), or the whole pool's with --pool."""
    if pool or server.startswith("pool://"):
        from woolyhv.pool.cli import sessions

        sessions(pool=server, as_json=as_json)
        return
    import time

    from proto.settings import check_endpoint
    from woolyhv.pool.cli import _checkpoint
    from woolyhv.top import AdminError, admin_call

    check_endpoint(server, "--server (WOOLY_SERVER)")
    try:
        info = admin_call(server, admin_token)
    except AdminError as exc:
        typer.echo(f"wooly ps: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    for d in info["devices"]:
        typer.echo(
            f"device {d['ordinal']} {d['backend']} {d['name']}: {_human(d['used'])} / {_human(d['total_mem'])} used"
        )
    typer.echo(
        f"{'session':12}  {'tenant':10}  {'pid':>7}  {'dev':>3}  {'memory':>10}  {'allocs':>6}  {'mods':>4}  {'strm':>4}  {'evts':>4}  {'age':>8}  {'moves':>5}  {'checkpoint':24}  program"
    )
    now = time.time()
    for s in info["sessions"]:
        ck = s.get("checkpoint") or {}
        row = {
            "checkpoint_s": ck.get("interval_s", 0),
            "checkpoint": {"at": ck["at"], "standby": ck["standby"]} if ck.get("at") else {},
        }
        typer.echo(
            f"{s['session']:12}  {s['tenant'][:10]:10}  {s['pid']:>7}  {s.get('device', 0):>3}  {_human(s['memory_used']):>10}  {s['allocations']:>6}  "
            f"{s['modules']:>4}  {s['streams']:>4}  {s['events']:>4}  {s['age_s']:>7.1f}s  {s.get('moves', 0):>5}  "
            f"{_checkpoint(row, now):24}  {s['program'][:40]}"
        )
    hv = info.get("hypervisor")
    if hv:
        from gpud.hypervisor.report import tenant_table

        typer.echo("")
        typer.echo(tenant_table(hv, _human))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    program: Annotated[str, typer.Argument(help="script.py, -m module, or any executable (an nvcc-built binary)")],
) -> None:
    """Run a program (a Python script or module, or a native executable) with the shim loaded (embedded gpud unless WOOLY_SERVER is set)."""
    from proto.settings import client as settings
    from woolyhv.launcher import run as launch

    launch([program, *ctx.args], settings())


@app.command()
def cache(
    clear: Annotated[bool, typer.Option("--clear", help="delete every compiled kernel in the cache")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The JIT's disk cache of compiled kernels on this machine: where, how many, how big, its bound
    (WOOLY_JIT_CACHE_DIR, WOOLY_JIT_CACHE_MAX)."""
    from jit import disk_cache

    if clear:
        n = disk_cache.clear()
        typer.echo(f"removed {n} cached kernel module(s) from {disk_cache.directory()}")
        return
    s = disk_cache.stats()
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    bound = _human(s["max_bytes"]) if s["max_bytes"] else "no bound"
    state = "" if s["enabled"] else "  (disabled: WOOLY_JIT_CACHE=0)"
    typer.echo(f"{s['dir']}: {s['entries']} module(s), {_human(s['bytes'])} of {bound}{state}")


@app.command()
def top(
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="WOOLY_SERVER",
            help="gpud endpoint or pool://...; default: the embedded gpud of a running `wooly run`",
        ),
    ] = None,
    interval: Annotated[float, typer.Option(help="seconds between refreshes")] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="print one screen and exit")] = False,
    admin_token: Annotated[
        str, typer.Option(envvar="WOOLY_ADMIN_TOKEN", show_default=False, help="gpud's admin token, where it has one")
    ] = "",
) -> None:
    """A live view of a gpud (tenants: memory, quota, shared, device share, ops/s, state, waits; devices; sessions)
    or of a pool's nodes."""
    from proto.settings import ConfigError, check_endpoint
    from woolyhv.top import AdminError, embedded_gpuds, run

    if not interval > 0:
        raise ConfigError(f"--interval={interval}: expected a number of seconds > 0")
    if not server:
        found = embedded_gpuds()
        if not found:
            raise ConfigError(
                "--server (WOOLY_SERVER) is unset and no `wooly run` with an embedded gpud is running: "
                "expected an endpoint such as tcp://host:5555"
            )
        server = found[-1][1]
        if len(found) > 1:
            typer.echo(f"wooly top: {len(found)} embedded gpuds; showing the one of pid {found[-1][0]}", err=True)
    elif not server.startswith("pool://"):
        check_endpoint(server, "--server (WOOLY_SERVER)")
    try:
        run(server, admin_token, interval, once)
    except AdminError as exc:
        typer.echo(f"wooly top: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command()
def doctor(
    server: Annotated[
        str | None,
        typer.Option("--server", help="gpud or pool to check (default: WOOLY_SERVER; unset: an embedded gpud)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    no_torch: Annotated[
        bool, typer.Option("--no-torch", help="skip the torch op (it starts a program under wooly run)")
    ] = False,
) -> None:
    """Check this setup end to end, one line a check with what to do when it fails: settings, versions, the pool,
    the connection and key, gpud's backend, the JIT cache, the native face, a PTX kernel and a torch op."""
    from woolyhv.doctor import main as run_doctor

    raise typer.Exit(run_doctor(server, as_json, torch_probe=not no_torch))


@app.command()
def version() -> None:
    """Print versions."""
    import gpud
    import shim
    from proto.constants import PROTOCOL_VERSION

    typer.echo(
        f"woolyhv {__import__('woolyhv').__version__} (gpud {gpud.__version__}, shim {shim.__version__}, protocol {PROTOCOL_VERSION}, python {sys.version.split()[0]}, pid {os.getpid()})"
    )


def _register_pool() -> None:
    from woolyhv.pool.cli import controller, estimate, pool_app

    app.add_typer(pool_app, name="pool")
    app.command()(controller)
    app.command()(estimate)


_register_pool()


def main(argv: list[str] | None = None) -> None:
    """The ``wooly`` entry point: a bad setting (flag, environment variable, config file) is one line naming it
    on stderr and exit status 2, never a traceback."""
    from proto.settings import ConfigError

    try:
        app(argv)
    except ConfigError as exc:
        typer.echo(f"wooly: {exc}", err=True)
        raise SystemExit(2) from None
