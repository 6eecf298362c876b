"""gpud's hypervisor: many tenants on one device (see docs/hypervisor.md).

- ``policy``: tenant policies and knobs from a TOML/YAML file and CLI flags;
- ``core``: tenants, quotas, the virtual GPU's cuMemGetInfo, hooks the server calls;
- ``dedup``: content-addressed, copy-on-write sharing of uploads across tenants;
- ``scheduler``: weighted fair, priority-aware sharing of device time;
- ``sleep``: moving idle or displaced tenants' memory out and back;
- ``metrics``: the Prometheus endpoint.

The server imports this package at start (``EXTENSION_MODULES``) and calls ``attach``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpud.errors import CudaError, codes
from gpud.hypervisor import dedup as _dedup  # noqa: F401 - registers the dedup message handlers
from gpud.hypervisor import torch_dedup as _torch_dedup  # noqa: F401 - and those of the torch face
from gpud.hypervisor.core import Hypervisor
from gpud.hypervisor.policy import HypervisorConfig, load
from gpud.session import CLOSE_HOOKS, MESSAGE_HOOKS

if TYPE_CHECKING:
    from gpud.server import Server
    from gpud.session import Session

__all__ = ["Hypervisor", "HypervisorConfig", "attach", "load"]


def attach(server: Server, config: HypervisorConfig | None = None) -> Hypervisor:
    return Hypervisor(server, config if config is not None else load())


def _before_message(session: Session, msg: Any, bulk: list[Any]) -> None:
    hv: Hypervisor | None = getattr(session.server, "hv", None)
    if hv is None:
        return
    try:
        hv.before_message(session, msg, bulk)
    except CudaError:
        raise
    except Exception as exc:  # noqa: BLE001 - client input must never take the daemon down
        raise CudaError(codes.UNKNOWN, f"hypervisor: {type(exc).__name__}: {exc}") from None


def _on_close(session: Session) -> None:
    hv: Hypervisor | None = getattr(session.server, "hv", None)
    if hv is not None:
        hv.on_close(session)


if _before_message not in MESSAGE_HOOKS:
    MESSAGE_HOOKS.append(_before_message)
if _on_close not in CLOSE_HOOKS:
    CLOSE_HOOKS.append(_on_close)
