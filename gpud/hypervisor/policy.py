"""Hypervisor configuration: tenant policies and daemon-wide knobs, from a TOML/YAML file and CLI flags.

A config file looks like this (TOML; the same keys work in YAML)::

    [hypervisor]
    overcommit_ratio = 1.5        # logical memory of all tenants (awake + asleep) <= ratio x device
    host_budget = "8GiB"          # slept memory kept in host RAM; beyond it, spilled to files
    spill_dir = "/var/tmp/wooly"  # where spilled memory goes
    metrics_port = 9400           # Prometheus endpoint (0 = off)
    require_token = false         # refuse tenants that are not listed (or whose token is wrong)
    admin_token = "..."           # admin calls (wooly ps) must carry it; with require_token and none set: refused
    ipc_uids = [1001]             # users besides gpud's own whose processes may connect over ipc (peer uid)

    [scheduler]
    enabled = true
    slots = 16                    # streams of the tenant holding the device that run at once
    aging_s = 0.25                # a waiting tenant gains one priority level per aging_s

    [dedup]
    enabled = true
    hash = "xxh3_128"             # or "sha256" where tenants do not trust each other
    chunk = "4MiB"

    [limits]                      # what one client may make gpud hold (NOTE [bounded daemon state])
    sessions = 1024
    sessions_per_tenant = 256
    reply_bytes = "256MiB"        # unsent replies of a session before gpud stops reading it

    [aten]                        # the PyTorch face's ops (NOTE [executors] in gpud/executors.py)
    executors = true              # one process per tenant; false: inside gpud (one trusted tenant only)
    permit_unsafe = false         # let executors run unsafe=True and unchecked index/sparse ops
    sandbox = true                # confine executors: landlock + seccomp (NOTE [executor sandbox], gpud/sandbox.py)

    [tenants.default]             # template for tenants not listed
    quota = 1.0                   # bytes ("2GiB", 2147483648) or a fraction of the device
    weight = 1
    priority = 2                  # 0 (lowest) .. 4 (highest)

    [tenants.alice]
    quota = "6GiB"
    weight = 3
    priority = 3
    idle_timeout_s = 300          # put to sleep after this much idleness (0 = never)
    max_kernel_s = 30             # a kernel running longer fails with CUDA_ERROR_LAUNCH_TIMEOUT (0 = no limit)
    token = "s3cret"
    keys = ["<z85 public key>"]   # client keys bound to alice (`wooly keys --client NAME`): no token needed with one
    devices = [0, 1]              # the devices alice's sessions may run on (default: any; `devices=0;1` in a spec)

CLI flags (``wooly gpud --tenant alice:quota=6GiB,weight=3 --metrics-port 9400``) override the file.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proto import settings
from proto.sizes import parse_bytes, split_size


def parse_size(value: Any) -> int | float:
    """``"2GiB"`` -> 2147483648; integers are bytes; a float in (0, 1] is a fraction of the device."""
    if isinstance(value, float):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"a fractional size must be in (0, 1], got {value}")
        return value
    if isinstance(value, str):
        s = value.strip().lower().replace("_", "")
        parts = split_size(s)
        if parts is None and s.endswith("%"):
            return parse_size(float(s[:-1]) / 100.0)
        if parts is not None and parts[1] == "" and "." in parts[0]:
            return parse_size(float(parts[0]))
    return parse_bytes(value, examples="4096, 512MiB, 2GiB, 0.25, 25%")


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckpointPolicy(_Cfg):
    """NOTE [checkpoints] (gpud/checkpoint.py): write the session's state to a standby node every ``interval_s``
    (at its next synchronisation point), so that the session survives this node's death."""

    interval_s: float = Field(10.0, ge=0.5, le=86400.0)
    target: Literal["peer"] = "peer"  # another node of the pool, chosen by the controller


class TenantPolicy(_Cfg):
    quota: int | float = 1.0  # bytes, or fraction of the device's memory
    weight: float = Field(1.0, gt=0, le=1e6)
    priority: int = Field(2, ge=0, le=4)
    overcommit: bool = True  # may displace (sleep) lower-priority idle tenants when the device is full
    idle_timeout_s: float = Field(0.0, ge=0)  # 0 = never sleeps for idleness
    max_kernel_s: float = Field(0.0, ge=0)  # a kernel running longer is stopped (LAUNCH_TIMEOUT); 0 = no limit
    token: str = ""
    keys: list[str] = Field(default_factory=list)  # client public keys (Z85) bound to this tenant (gpud/zap.py)
    sleepable: bool = True  # may be put to sleep at all
    checkpoint: CheckpointPolicy | None = None  # NOTE [checkpoints]; ``checkpoint=10`` in a --tenant spec
    # NOTE [session devices] (gpud/server.py): the device ordinals its sessions may run on; None: any of them
    devices: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(None, max_length=1024)

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, v: Any) -> Any:
        if isinstance(v, str):  # ``devices=0;1`` in a --tenant spec
            try:
                return [int(x) for x in v.replace(";", " ").split()]
            except ValueError:
                raise ValueError(f"devices: {v!r} is not a list of device ordinals (devices=0;1)") from None
        return v

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _checkpoint(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() in ("", "0", "off", "no", "false"):
            return None
        if isinstance(v, str):
            try:
                v = float(v.strip().lower().removesuffix("s"))
            except ValueError:
                raise ValueError(
                    f"checkpoint: {v!r} is not an interval in seconds (checkpoint=10) or a table "
                    '{interval_s = 10, target = "peer"}'
                ) from None
        if isinstance(v, int | float) and not isinstance(v, bool):
            return None if v == 0 else {"interval_s": v}
        return v

    @field_validator("keys")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        for k in v:
            if len(k) != 40:
                raise ValueError(f"keys: {k[:50]!r} is not a 40-character Z85 public key (`wooly keys --client NAME`)")
        return v

    @field_validator("quota", mode="before")
    @classmethod
    def _quota(cls, v: Any) -> int | float:
        return parse_size(v)

    def quota_bytes(self, device_total: int) -> int:
        if isinstance(self.quota, float):
            return int(self.quota * device_total)
        return min(int(self.quota), device_total) if self.quota else device_total


class SchedulerConfig(_Cfg):
    enabled: bool = True
    # spatial: tenants run at once on shares of the device's cores, re-divided between blocks (NOTE [spatial
    # sharing], jit/cores.py; backends that cannot divide their device fall back to timeslice); timeslice: one
    # tenant holds the device at a time (NOTE [scheduling])
    mode: Literal["spatial", "timeslice"] = "spatial"
    slots: int = Field(16, ge=1, le=256)
    aging_s: float = Field(0.25, gt=0)


class DedupConfig(_Cfg):
    enabled: bool = True
    hash: Literal["xxh3_128", "sha256"] = "xxh3_128"
    chunk: int = 4 << 20

    @field_validator("chunk", mode="before")
    @classmethod
    def _chunk(cls, v: Any) -> int:
        n = parse_size(v)
        if not isinstance(n, int) or n < 64 << 10 or n > 256 << 20 or n % 4096:
            raise ValueError("dedup.chunk must be a multiple of 4 KiB between 64 KiB and 256 MiB")
        return n


class LimitsConfig(_Cfg):
    """NOTE [bounded daemon state] (gpud/session.py): what one client may make gpud hold."""

    sessions: int = Field(1024, ge=1)  # live sessions in all
    sessions_per_tenant: int = Field(256, ge=1)
    allocations: int = Field(1 << 20, ge=1)  # per session: device allocations
    modules: int = Field(4096, ge=1)  # per session: loaded modules
    functions: int = Field(1 << 16, ge=1)
    streams: int = Field(1 << 14, ge=1)
    events: int = Field(1 << 16, ge=1)
    loads_in_flight: int = Field(8, ge=1)  # module loads (compiles) a session may have queued at once
    reply_bytes: int = 256 << 20  # replies of one session gpud may hold unsent; past them it stops reading it
    parked_bytes: int = 64 << 20  # requests held meanwhile; past them the session is closed

    @field_validator("reply_bytes", "parked_bytes", mode="before")
    @classmethod
    def _bytes(cls, v: Any) -> int:
        n = parse_size(v)
        if not isinstance(n, int) or n < 1 << 20:
            raise ValueError("must be a byte count of at least 1 MiB")
        return n


class AtenConfig(_Cfg):
    """NOTE [executors] (gpud/executors.py): where the PyTorch face's ATen ops run."""

    executors: bool = True  # in one process per tenant (False: inside gpud, for one trusted tenant)
    permit_unsafe: bool = False  # run ops gpud refuses (unsafe=True, unchecked index/sparse constructors)
    sandbox: bool = True  # confine each executor (NOTE [executor sandbox] in gpud/sandbox.py); off to debug one

    @model_validator(mode="after")
    def _unsafe_needs_executors(self) -> AtenConfig:
        if self.permit_unsafe and not self.executors:
            raise ValueError(
                "aten.permit_unsafe needs aten.executors: without them an unsafe op reads other tenants' memory"
            )
        return self


class HypervisorConfig(_Cfg):
    overcommit_ratio: float = Field(1.0, ge=1.0, le=100.0)
    host_budget: int = 4 << 30
    spill_dir: str = ""
    metrics_port: int = Field(0, ge=0, le=65535)
    metrics_addr: str = "127.0.0.1"
    require_token: bool = False
    admin_token: str = ""
    ipc_uids: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)  # besides gpud's own, may use ipc
    require_keys: bool = False  # tcp clients must use a key some tenant lists (NOTE [client keys])
    idle_check_s: float = Field(1.0, gt=0)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    aten: AtenConfig = Field(default_factory=AtenConfig)
    tenants: dict[str, TenantPolicy] = Field(default_factory=dict)

    @field_validator("host_budget", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> int:
        n = parse_size(v)
        if not isinstance(n, int):
            raise ValueError("host_budget must be a byte count")
        return n

    def policy(self, tenant: str) -> TenantPolicy:
        p = self.tenants.get(tenant)
        if p is not None:
            return p
        return self.tenants.get("default") or TenantPolicy()


def _read_file(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(raw.decode()) or {}
    else:
        import tomllib

        data = tomllib.loads(raw.decode())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a table/mapping")
    return data


def _flatten(data: dict[str, Any]) -> dict[str, Any]:
    """File layout ([hypervisor], [scheduler], [dedup], [tenants.*]) -> HypervisorConfig fields."""
    out: dict[str, Any] = dict(data.get("hypervisor", {}))
    for key in ("scheduler", "dedup", "limits", "aten", "tenants"):
        if key in data:
            out[key] = data[key]
    unknown = set(data) - {"hypervisor", "scheduler", "dedup", "limits", "aten", "tenants"}
    if unknown:
        raise ValueError(f"unknown config section(s): {', '.join(sorted(unknown))}")
    return out


def parse_tenant_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``alice:quota=2GiB,weight=3,priority=4`` -> ("alice", {...})."""
    name, _, rest = spec.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"tenant spec {spec!r} has no name (form: name:key=value,...)")
    fields: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, val = part.partition("=")
        if not eq:
            raise ValueError(f"tenant spec {spec!r}: {part!r} is not key=value")
        key = key.strip().replace("-", "_")
        if key in ("overcommit", "sleepable"):
            fields[key] = val.strip().lower() in ("1", "true", "yes", "on")
        elif key in ("weight", "idle_timeout_s", "max_kernel_s"):
            fields[key] = float(val)
        elif key == "priority":
            fields[key] = int(val)
        else:
            fields[key] = val.strip()
    return name, fields


def load(
    path: str | None = None,
    *,
    tenant_specs: list[str] | None = None,
    metrics_port: int | None = None,
    overrides: dict[str, Any] | None = None,
) -> HypervisorConfig:
    data: dict[str, Any] = _flatten(_read_file(path)) if path else {}
    for spec in tenant_specs or []:
        name, fields = parse_tenant_spec(spec)
        data.setdefault("tenants", {}).setdefault(name, {}).update(fields)
    if metrics_port is not None:
        data["metrics_port"] = metrics_port
    for k, v in (overrides or {}).items():
        data[k] = v
    if "spill_dir" not in data or not data["spill_dir"]:
        data["spill_dir"] = settings.gpud().spill_dir or os.path.join(
            os.environ.get("TMPDIR", "/tmp"), f"wooly-spill-{os.getuid()}"
        )
    return HypervisorConfig.model_validate(data)
