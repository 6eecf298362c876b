"""The tenant table of ``wooly ps`` (kept here so the CLI stays a thin shell)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def tenant_table(hv: dict[str, Any], human: Callable[[float], str]) -> str:
    rows = [
        f"{'tenant':12}  {'sess':>4}  {'memory used / quota':>23}  {'shared':>10}  {'share':>6}  "
        f"{'dev time':>9}  {'state':6}  {'prio':>4}  {'weight':>6}  {'max wait':>8}  {'cores':>5}  {'core s':>8}  "
        f"{'concur':>6}  {'executor':>8}"
    ]
    for t in hv.get("tenants", []):
        mem = f"{human(t['memory_used'])} / {human(t['memory_quota'])}"
        rows.append(
            f"{t['tenant'][:12]:12}  {t['sessions']:>4}  {mem:>23}  {human(t['shared_bytes']):>10}  "
            f"{100 * t['device_share']:>5.1f}%  {t['device_time_s']:>8.2f}s  {t['state']:6}  {t['priority']:>4}  "
            f"{t['weight']:>6g}  {t['max_wait_s']:>7.3f}s  {t.get('core_share', 0.0):>5.2f}  "
            f"{t.get('core_s', 0.0):>7.2f}s  {100 * t.get('concurrency', 0.0):>5.1f}%  "
            f"{t.get('executor_pid') or '-':>8}"
        )
    d = hv.get("dedup", {})
    phys = ", ".join(f"dev{k} {human(v)}" for k, v in hv.get("physical", {}).items())
    rows.append(
        f"device memory in use: {phys}; dedup store {human(d.get('store_bytes', 0))} in {d.get('chunks', 0)} chunks"
    )
    sch = hv.get("scheduler")
    if sch:
        rows.append(
            f"scheduler ({sch.get('mode', 'timeslice')}): {sch['slots']} slot(s), {sch['waiting']} waiting; starvation: max wait "
            f"{sch['starvation_max_wait_s']:.3f}s, p99 {sch['starvation_p99_wait_s']:.3f}s"
        )
    s = hv.get("sleep", {})
    if s.get("sleeps"):
        rows.append(
            f"sleep: {s['sleeps']} sleeps, {s['wakes']} wakes, last wake {s['last_wake_s']:.3f}s; "
            f"host {human(s['host_used'])}, spilled {human(s['spilled'])}"
        )
    return "\n".join(rows)
