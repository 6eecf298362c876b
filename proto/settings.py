"""Every ``WOOLY_*`` environment variable, declared once (NOTE [settings]).

NOTE [settings]: a variable is read through the settings class of the side that reads it, never through
``os.environ``: ``ClientSettings`` (the program's process: the shim, the torch face, ``wooly run`` and the CLI's
client commands), ``GpudSettings`` (the daemon, the controller, a pool node) and ``JitSettings`` (the PTX
translator, which runs inside gpud). ``client()``, ``gpud()`` and ``jit()`` return the settings of this process's
environment, validated as a whole and cached until a ``WOOLY_*`` variable changes (tests and benchmarks change
them at run time), so a read costs a dictionary scan, not a validation. A bad value is a ``ConfigError`` whose
message is one line naming the variable and what it expects (``WOOLY_TIMEOUT_S='abc': expected a number of
seconds > 0``): the CLI prints it and exits with 2, gpud refuses to start, the shim turns it into a CUDA error of
the call that needed the setting. An empty value means "unset". ``INTERNAL`` lists the variables wooly sets for
its own child processes. The README's table is generated from these declarations (``python -m proto.settings``),
and tests/unit/test_settings.py fails when the README's copy differs or when code reads a ``WOOLY_*`` variable
that is not declared here.

The module is a leaf: it imports nothing of the project but ``proto.sizes``, so shim/, gpud/ and jit/ read their
settings without importing the CLI package.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proto.sizes import parse_bytes

ENV_PREFIX = "WOOLY_"


class ConfigError(ValueError):
    """A setting (environment variable, flag or config file entry) with a value it cannot have: one line."""


# ---------------------------------------------------------------------------------------------- value checks
_TCP = re.compile(r"^tcp://(\*|[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$")


def check_endpoint(value: str, what: str, listen: bool = False) -> str:
    """``value`` if it is an endpoint gpud can use (tcp://host:port, ipc:///path), else ConfigError naming ``what``
    (the variable or flag it came from)."""
    m = _TCP.match(value)
    if m is not None:
        port = int(m.group(2))
        if 0 < port < 65536 and (listen or m.group(1) != "*"):
            return value
    elif value.startswith("ipc://") and len(value) > len("ipc://") and "\0" not in value:
        return value
    example = "tcp://0.0.0.0:5555 or ipc:///run/wooly/gpud.sock" if listen else "tcp://host:5555 or ipc:///path"
    raise ConfigError(f"{what}={value!r}: expected an endpoint such as {example}")


def pool_controllers(url: str, what: str = "WOOLY_SERVER") -> list[str]:
    """``pool://h1:7000,h2:7000`` -> ["tcp://h1:7000", "tcp://h2:7000"] (ConfigError naming ``what`` otherwise):
    the controllers of a pool (NOTE [pool client] in woolyhv/pool/client.py)."""
    if not url.startswith("pool://") or len(url) <= len("pool://"):
        raise ConfigError(f"{what}={url!r}: expected pool://HOST:PORT[,HOST:PORT...] (the pool's controllers)")
    out = []
    for part in url[len("pool://") :].split(","):
        ep = "tcp://" + part.strip()
        try:
            check_endpoint(ep, what)
        except ConfigError:
            raise ConfigError(f"{what}={url!r}: {part.strip()!r} is not HOST:PORT") from None
        out.append(ep)
    return out


def _size(v: object) -> int:
    if isinstance(v, bool):
        raise ValueError("expected a size such as 4GiB, 512MiB or a number of bytes")
    try:
        return parse_bytes(v if isinstance(v, int) else str(v))
    except ValueError:
        raise ValueError("expected a size such as 4GiB, 512MiB or a number of bytes") from None


Bytes = Annotated[int, BeforeValidator(_size)]


def _between(lo: float, hi: float, what: str) -> Any:
    def check(v: Any) -> Any:
        if not lo <= v <= hi or v != v:
            raise ValueError(what)
        return v

    check.expects = what  # type: ignore[attr-defined]  # also the message when the value is not a number at all
    return check


def _range(lo: float, hi: float, what: str) -> Any:
    return AfterValidator(_between(lo, hi, what))


Seconds = Annotated[float, _range(1e-9, 1e9, "expected a number of seconds > 0")]
SecondsOrZero = Annotated[float, _range(0.0, 1e9, "expected a number of seconds >= 0 (0: no limit)")]


# ------------------------------------------------------------------------------------------------ the sides
class _Side(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True)


class KeySettings(_Side):
    """Where the CURVE keys live: read by both sides (proto/curve.py)."""

    key_dir: str = Field(
        "",
        description="where gpud keeps its CURVE key pair and a same-host client finds its public key "
        "(default `~/.config/wooly/keys`)",
    )

    def keys_folder(self) -> str:
        return self.key_dir or os.path.join(
            os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "wooly", "keys"
        )


class ClientSettings(KeySettings):
    """The program's side: the shim, the torch face, ``wooly run`` and the CLI's client commands."""

    server: str = Field(
        "",
        description="gpud endpoint, `tcp://host:5555` or `ipc:///path`, or a pool: `pool://ctl:7000[,ctl2:7000]`; "
        "empty: `wooly run` starts an embedded gpud",
    )
    tenant: str = Field("default", description="the tenant this client belongs to")
    token: str = Field("", description="the tenant's token, where gpud's config asks for one")
    server_key: str = Field(
        "",
        description="gpud's public CURVE key (Z85 text or a key file) for a `tcp://` server "
        "(default: this user's own `server.key`)",
    )
    client_key: str = Field(
        "",
        description="this client's key file (`wooly keys --client NAME`); a tenant whose config lists its public "
        "key takes the session without a token (default: a fresh pair per connection)",
    )
    insecure: bool = Field(False, description="speak to a `tcp://` gpud in clear (one started `--insecure`)")
    device: Annotated[int, _range(-1, 1023, "expected a device ordinal from 0 to 1023, or -1 (gpud places it)")] = (
        Field(
            -1,
            description="the gpud device the session runs on (the program then sees it as its one device); `-1`: the "
            "first `CUDA_VISIBLE_DEVICES` entry if it is a number, else gpud places it (a pool places it itself), "
            "and a PyTorch program sees the tenant's other devices after it",
        )
    )
    timeout_s: Seconds = Field(
        4.0, description="seconds of gpud silence after which a call fails with `CUDA_ERROR_DEVICE_UNAVAILABLE`"
    )
    connect_timeout_s: Seconds = Field(10.0, description="seconds to wait for gpud to answer the first hello")
    probe_s: Seconds = Field(
        1.0,
        description="seconds for a first connection: nothing accepting one is `CUDA_ERROR_NO_DEVICE` "
        "(`torch.cuda.is_available()` False) at once, a refused handshake (wrong key) says so at once",
    )
    shm: bool = Field(True, description="same-host bulk copies through shared memory")
    dedup: bool = Field(True, description="upload large host buffers by content, so gpud can share identical ones")
    replay_log_mb: Annotated[int, _range(1, 1 << 20, "expected a whole number of MiB from 1 to 1048576")] = Field(
        1024,
        description="a checkpointed session keeps at most this many MiB of calls since its last checkpoint to replay "
        "after a failover",
    )
    # placement in a pool (WOOLY_SERVER=pool://...): NOTE [pool client] in woolyhv/pool/client.py
    mem: Bytes = Field(
        0, description="pool: the device memory to reserve (`4GiB`); `0`: estimated from `WOOLY_MODEL`, else 1 GiB"
    )
    model: str = Field(
        "",
        description="pool: a checkpoint (directory, config.json or .safetensors) to estimate memory from; its "
        "content sample also draws the session to nodes holding that model",
    )
    context: Annotated[int, _range(1, 1 << 40, "expected a number of tokens > 0")] = Field(
        4096, description="pool: context length for the KV-cache part of an estimate"
    )
    training: bool = Field(False, description="pool: estimate for training (gradients and Adam state)")
    vendor: str = Field("", description="pool: only nodes with devices of this vendor: `nvidia`, `amd`, `cpu`")
    arch: str = Field("", description="pool: only devices of this architecture: `sm_90` exactly, `sm_80+` or newer")
    priority: Annotated[int, _range(-1000, 1000, "expected a whole number from -1000 to 1000")] = Field(
        0, description="pool: waiting placement requests with a higher priority go first"
    )
    place_timeout_s: Seconds = Field(60.0, description="pool: seconds a placement may wait for room")
    # the embedded gpud of `wooly run`
    backend: str = Field(
        "auto",
        description="backend of the embedded gpud: `auto`, `cpu` or `nvidia` (AMD devices are detected, not yet "
        "run on)",
    )
    cpu_memory: Annotated[int, _range(0, 1 << 62, "expected a number of bytes >= 0 (0: the host's memory)")] = Field(
        0, description="bytes the embedded gpud's CPU backend offers (`0`: the host's memory)"
    )
    log_level: str = Field("warning", description="log level of the embedded gpud: debug, info, warning, error")
    # the torch face (NOTE [aten wire] in proto/aten.py)
    torch_flush_ops: Annotated[int, _range(1, 1 << 20, "expected a whole number of ops >= 1")] = Field(
        24, description="torch: send queued ops to gpud once this many wait"
    )
    torch_flush_age_s: Seconds = Field(0.002, description="torch: and once the oldest has waited this long")
    torch_prewarm: bool = Field(True, description="torch: open the session while torch imports")
    torch_cuda_device: bool = Field(
        True,
        description="torch: tensors on the real `cuda` device type (a small C++ extension built on first use); "
        "`0`: the wrapper-subclass fallback",
    )
    # what the user sees
    progress: bool | None = Field(
        None,
        description="progress on stderr for uploads of 256 MiB or more and module loads over 1 s (default: on a "
        "terminal; `1`: even on a pipe, `0`: never)",
    )
    quiet: bool = Field(False, description="no notes on stderr from wooly itself (placements, warnings)")
    quiet_unsupported: bool = Field(False, description="no note for each CUDA call wooly does not support")
    trace_unsupported: bool = Field(False, description="a Python stack with each unsupported CUDA call")
    trace_calls: bool = Field(False, description="print every CUDA call of the native face with its result")
    traceback: bool = Field(False, description="keep the traceback of an error `wooly run` would print in one line")
    debug: bool = Field(False, description="raise a face's or a callback's errors instead of reporting them")
    cache_dir: str = Field("", description="root of the shim's build cache (default `$XDG_CACHE_HOME/wooly`)")

    @field_validator("server")
    @classmethod
    def _server(cls, v: str) -> str:
        if v.startswith("pool://"):
            pool_controllers(v)
            return v
        return check_endpoint(v, "WOOLY_SERVER") if v else v

    @field_validator("vendor")
    @classmethod
    def _vendor(cls, v: str) -> str:
        if v not in ("", "nvidia", "amd", "cpu"):
            raise ValueError("expected one of nvidia, amd, cpu")
        return v

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: str) -> str:
        if v and not re.fullmatch(r"[a-z]+_?[0-9]+[a-z]?\+?", v):
            raise ValueError("expected an architecture such as sm_90, sm_80+ or gfx942")
        return v

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v.lower() not in ("debug", "info", "warning", "error"):
            raise ValueError("expected one of debug, info, warning, error")
        return v.lower()

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        if v == "amd":
            raise ValueError(
                "expected one of auto, cpu, nvidia (gpud has no ROCm execution backend yet: AMD devices "
                "are detected and placed on in a pool, not run on)"
            )
        if v not in ("auto", "cpu", "nvidia"):
            raise ValueError("expected one of auto, cpu, nvidia")
        return v


class GpudSettings(KeySettings):
    """The daemon's side: gpud, the pool's controller and a node joining a pool."""

    admin_token: str = Field(
        "", description="gpud and the controller: the token admin calls must carry; `wooly ps`: the token it sends"
    )
    join: str = Field("", description="gpud: join the pool whose etcd is here (`etcd://HOST:2379`)")
    node_name: str = Field("", description="gpud: this node's name in the pool (default: the host name)")
    advertise: str = Field(
        "", description="gpud: the endpoint the pool's clients are sent to (default: the tcp listener)"
    )
    etcd: str = Field("", description="controller: the pool's etcd (default `etcd://127.0.0.1:2379`)")
    etcd_ca: str = Field("", description="for an `https://` etcd: its CA certificate (controller and gpud)")
    etcd_cert: str = Field("", description="for an `https://` etcd: the client certificate")
    etcd_key: str = Field("", description="for an `https://` etcd: the client certificate's key")
    etcd_bin: str = Field("", description="the etcd binary a local pool starts (default: `etcd` on PATH)")
    log_json: bool = Field(False, description="gpud logs as JSON lines")
    spill_dir: str = Field(
        "",
        description="gpud: where sleeping tenants' memory spills beyond the host budget "
        "(default `$TMPDIR/wooly-spill-UID`)",
    )
    torch_path: str = Field(
        "", description="gpud: a directory holding another torch build (the vendor's), put first on gpud's path"
    )

    @field_validator("torch_path")
    @classmethod
    def _torch_path(cls, v: str) -> str:
        if v and not os.path.isdir(os.path.join(v, "torch")):
            raise ValueError("expected a directory holding a torch package (pip install --target DIR torch)")
        return v


class JitSettings(_Side):
    """The PTX translator's side (it runs inside gpud; NOTE [bounded compiler] in jit/worker.py)."""

    jit_cache: bool = Field(True, description="keep compiled kernels on disk")
    jit_cache_dir: str = Field("", description="where compiled kernels are kept (default `~/.cache/wooly/jit`)")
    jit_cache_max: Bytes = Field(
        1 << 30, description="bound of that disk cache (`0`: none); least recently used kernels go first"
    )
    jit_tiers: bool = Field(
        True, description="run quick code at once and switch to optimised code when a background compile lands"
    )
    jit_lazy_bytes: Bytes = Field(
        1 << 20, description="PTX modules larger than this are translated kernel by kernel (`0`: never)"
    )
    jit_workers: Annotated[int, _range(1, 256, "expected a whole number of processes from 1 to 256")] = Field(
        1, description="compile worker processes"
    )
    jit_worker_memory: Bytes = Field(4 << 30, description="address space a compile worker may map (`0`: no limit)")
    jit_compile_cpu_s: SecondsOrZero = Field(60.0, description="CPU seconds one compile may take (`0`: no limit)")
    jit_compile_wall_s: Seconds = Field(300.0, description="wall-clock seconds one compile may take")
    jit_background_nice: Annotated[int, _range(0, 19, "expected a nice value from 0 to 19")] = Field(
        10, description="scheduling niceness of the background (tier-up) compile worker"
    )
    jit_shared_objects: Annotated[int, _range(1, 1 << 20, "expected a whole number >= 1")] = Field(
        1024, description="compiled modules kept loaded as shared objects"
    )
    jit_max_engines: Annotated[int, _range(1, 1 << 20, "expected a whole number >= 1")] = Field(
        512, description="LLVM execution engines kept (modules past this are loaded as shared objects)"
    )
    jit_malloc_heap: Bytes = Field(
        8 << 20, description="device `malloc` heap of a launch (as CUDA's cudaLimitMallocHeapSize)"
    )
    ld_lld: str = Field("", description="the `ld.lld` that links AMDGPU code objects (default: on PATH)")


# Variables wooly sets for its own child processes (a user does not set them).
INTERNAL: dict[str, str] = {
    "WOOLY_EMBEDDED": "set by `wooly run` when it started the gpud the program talks to",
    "WOOLY_PARENT_DEVICE": "the gpud device a program's first session was placed on, for the processes it starts",
    "WOOLY_NATIVE_LIBDIR": "the folder of the shim's libcuda (and the vendor stand-ins) `wooly run` put on the path",
    "WOOLY_LIBPYTHON": "the libpython a native program's libcuda embeds",
    "WOOLY_PYTHONHOME": "that interpreter's prefix",
    "WOOLY_PYTHONPATH": "that interpreter's module path",
    "WOOLY_NVRTC_REAL": "the real libnvrtc the NVRTC stand-in forwards to (NOTE [nvrtc stand-in])",
    "WOOLY_TRACE_EXPORT": "libcuda: print each export table a runtime asks for (debugging cudart)",
}


def internal(name: str) -> str:
    """One of the ``INTERNAL`` variables ("" when unset)."""
    if name not in INTERNAL:
        raise KeyError(f"{name} is not one of wooly's internal variables")
    return os.environ.get(name, "")


# ------------------------------------------------------------------------------------------------ reading
_EXPECTED = {
    "float_parsing": "expected a number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "bool_parsing": "expected 1/0, true/false, yes/no or on/off",
}
S = TypeVar("S", bound=_Side)
_cache: dict[type, tuple[tuple[tuple[str, str], ...], Any]] = {}
_lock = threading.Lock()


def _snapshot() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIX)))


def load(cls: type[S]) -> S:
    """``cls`` from this process's environment; ConfigError (one line) naming the first bad variable."""
    snap = _snapshot()
    hit = _cache.get(cls)
    if hit is not None and hit[0] == snap:
        return hit[1]
    try:
        value = cls()
    except ValidationError as exc:
        raise _config_error(cls, exc) from None
    with _lock:
        _cache[cls] = (snap, value)
    return value


def _config_error(cls: type[_Side], exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err.get("loc") else "?"
    ctx = err.get("ctx")
    if isinstance(ctx, dict) and isinstance(ctx.get("error"), ConfigError):
        return ctx["error"]
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    if err.get("type") in _EXPECTED:
        msg = _EXPECTED[str(err["type"])]
        info = cls.model_fields.get(field)
        for m in info.metadata if info is not None else ():
            if isinstance(m, AfterValidator) and hasattr(m.func, "expects"):
                msg = m.func.expects
    value = err.get("input")
    return ConfigError(f"{ENV_PREFIX}{field.upper()}={value!r}: {msg}")


def client() -> ClientSettings:
    return load(ClientSettings)


def quiet_client() -> ClientSettings:
    """The client's settings, or its defaults where a variable is bad: for error paths and notes, which must not
    fail themselves (the call that needs the settings, ``shim.runtime.driver()``, reports the bad variable)."""
    try:
        return client()
    except ConfigError:
        return ClientSettings.model_construct()


def gpud() -> GpudSettings:
    return load(GpudSettings)


def jit() -> JitSettings:
    return load(JitSettings)


def env_name(cls: type[_Side], field: str) -> str:
    """The variable a field is read from: ``env_name(GpudSettings, "join")`` -> ``"WOOLY_JOIN"``."""
    if field not in cls.model_fields:
        raise KeyError(f"{cls.__name__} declares no {field!r}")
    return ENV_PREFIX + field.upper()


SIDES: tuple[tuple[str, type[_Side]], ...] = (
    ("client", ClientSettings),
    ("gpud", GpudSettings),
    ("jit", JitSettings),
)


def declared() -> dict[str, list[str]]:
    """Every variable users may set -> the sides that read it."""
    out: dict[str, list[str]] = {}
    for side, cls in SIDES:
        for name in cls.model_fields:
            out.setdefault(ENV_PREFIX + name.upper(), []).append(side)
    return out


def _default_text(field: Any) -> str:
    d = field.default
    if d is None or d == "":
        return "*(unset)*"
    if isinstance(d, bool):
        return f"`{int(d)}`"
    if d and any(isinstance(m, BeforeValidator) and m.func is _size for m in field.metadata):
        for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if d % unit == 0:
                return f"`{d // unit}{name}`"
    return f"`{d}`"


def markdown_table() -> str:
    """The README's table of settings, generated from the declarations (``python -m proto.settings``)."""
    rows = ["| variable | read by | default | meaning |", "|---|---|---|---|"]
    seen: set[str] = set()
    sides = declared()
    for _, cls in SIDES:
        for name, field in cls.model_fields.items():
            var = ENV_PREFIX + name.upper()
            if var in seen:
                continue
            seen.add(var)
            desc = (field.description or "").replace("|", "\\|")
            rows.append(f"| `{var}` | {', '.join(sides[var])} | {_default_text(field)} | {desc} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
