"""Settings from the environment (``WOOLY_*``), shared by the CLI, the shim and gpud.

A bad value is a ``ConfigError`` whose message is one line naming the variable and what it expects
(``WOOLY_TIMEOUT_S='abc': expected a number of seconds > 0``); the CLI prints it and exits with 2, the shim turns it
into a CUDA error of the call that needed the setting.
"""

from __future__ import annotations

import re

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "WOOLY_"


class ConfigError(ValueError):
    """A setting (environment variable, flag or config file entry) with a value it cannot have: one line."""


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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    server: str = Field("", description="gpud endpoint (tcp://host:5555, ipc:///path); empty = embedded local gpud")
    tenant: str = Field("default", description="tenant this client belongs to")
    token: str = Field("", description="tenant token, checked by gpud when its config asks for one")
    timeout_s: float = Field(4.0, description="seconds of gpud silence after which a call fails")
    connect_timeout_s: float = Field(10.0, description="seconds to wait for gpud to answer the first hello")
    probe_s: float = Field(1.0, description="seconds for a first connection to gpud before it counts as absent")
    log_level: str = Field("info", description="gpud log level")
    cpu_memory: int = Field(0, description="bytes the CPU backend offers (0 = host RAM)")
    backend: str = Field("auto", description="gpud backend: auto, cpu, nvidia")
    shm: bool = Field(True, description="use shared memory for bulk copies when gpud is on this host")
    # placement in a pool (WOOLY_SERVER=pool://...): NOTE [pool client] in woolyhv/pool/client.py
    mem: int = Field(
        0, description="device memory this program needs (4GiB); 0 = estimate from WOOLY_MODEL, else 1 GiB"
    )
    model: str = Field("", description="model checkpoint (directory, config.json or .safetensors) to estimate from")
    context: int = Field(4096, description="context length for the KV-cache part of an estimate")
    training: bool = Field(False, description="estimate for training (gradients and Adam state) instead of inference")
    vendor: str = Field("", description="only nodes with devices of this vendor: nvidia, amd, cpu")
    arch: str = Field("", description="only devices of this architecture: sm_90, or sm_80+ for that or newer")
    priority: int = Field(0, description="placement priority (-1000..1000): higher waits less")
    place_timeout_s: float = Field(60.0, description="seconds a placement may wait for room in the pool")
    replay_log_mb: int = Field(1024, description="MiB of calls a checkpointed session keeps to replay after a failover")

    @field_validator("server")
    @classmethod
    def _server(cls, v: str) -> str:
        if v.startswith("pool://"):
            pool_controllers(v)
            return v
        return check_endpoint(v, "WOOLY_SERVER") if v else v

    @field_validator("mem", mode="before")
    @classmethod
    def _mem(cls, v: object) -> int:
        from woolyhv.sizes import parse_bytes

        try:
            return parse_bytes(v if isinstance(v, int) else str(v), "4GiB, 512MiB, 0")  # type: ignore[arg-type]
        except ValueError:
            raise ValueError("expected a size such as 4GiB or 512MiB") from None

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

    @field_validator("priority")
    @classmethod
    def _priority(cls, v: int) -> int:
        if not -1000 <= v <= 1000:
            raise ValueError("expected a whole number from -1000 to 1000")
        return v

    @field_validator("context")
    @classmethod
    def _context(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("expected a number of tokens > 0")
        return v

    @field_validator("timeout_s", "connect_timeout_s", "place_timeout_s", "probe_s")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0 or v != v or v == float("inf"):
            raise ValueError("expected a number of seconds > 0")
        return v

    @field_validator("replay_log_mb")
    @classmethod
    def _replay(cls, v: int) -> int:
        if not 1 <= v <= 1 << 20:
            raise ValueError("expected a whole number of MiB from 1 to 1048576")
        return v

    @field_validator("cpu_memory")
    @classmethod
    def _bytes(cls, v: int) -> int:
        if v < 0:
            raise ValueError("expected a number of bytes >= 0 (0: the host's memory)")
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


_EXPECTED = {
    "float_parsing": "expected a number",
    "int_parsing": "expected a whole number",
    "bool_parsing": "expected 1/0, true/false, yes/no or on/off",
}
_FIELD_EXPECTS = {
    "timeout_s": "expected a number of seconds > 0",
    "connect_timeout_s": "expected a number of seconds > 0",
    "place_timeout_s": "expected a number of seconds > 0",
    "probe_s": "expected a number of seconds > 0",
    "priority": "expected a whole number from -1000 to 1000",
    "cpu_memory": "expected a number of bytes >= 0 (0: the host's memory)",
    "replay_log_mb": "expected a whole number of MiB from 1 to 1048576",
}


def settings() -> Settings:
    """The settings of this process's environment; ConfigError (one line) for the first bad variable."""
    try:
        return Settings()
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err.get("loc") else "?"
        msg = str(err.get("msg", ""))
        if isinstance(err.get("ctx"), dict) and isinstance(err["ctx"].get("error"), ConfigError):
            raise err["ctx"]["error"] from None
        if err.get("type") in _EXPECTED:
            msg = _FIELD_EXPECTS.get(field, _EXPECTED[err["type"]])
        msg = msg.removeprefix("Value error, ")
        raise ConfigError(f"{ENV_PREFIX}{field.upper()}={err.get('input')!r}: {msg}") from None
