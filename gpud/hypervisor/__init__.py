"""gpud's hypervisor: many tenants on one device (see docs/hypervisor.md).

- ``policy``: tenant policies and knobs from a TOML/YAML file and CLI flags;
- ``core``: tenants, quotas, the virtual GPU's cuMemGetInfo, hooks the server calls;
- ``dedup``: content-addressed, copy-on-write sharing of uploads across tenants;
- ``scheduler``: weighted fair, priority-aware sharing of device time;
- ``sleep``: moving idle or displaced tenants' memory out and back;
- ``metrics``: the Prometheus endpoint.

The server is constructed with one ``Hypervisor`` (``server.hv``); sessions call its hooks directly
(``check_message`` before each message, ``on_close`` after everything else a closing session held is freed).
"""

from __future__ import annotations

from gpud.hypervisor import dedup as _dedup  # noqa: F401 - registers the dedup message handlers
from gpud.hypervisor import torch_dedup as _torch_dedup  # noqa: F401 - and those of the torch face
from gpud.hypervisor.core import Hypervisor
from gpud.hypervisor.policy import HypervisorConfig, load

__all__ = ["Hypervisor", "HypervisorConfig", "load"]
