"""pytest plugin used by the external-suite runners (tests/suite_runner.py) inside ``wooly run``: one JSON line per test, crash-safe.

Writes to $WOOLY_SUITE_OUT a "start" line before each test and an outcome line after it, so the
orchestrator knows which test was running when a process died; skips tests listed (by node id)
in $WOOLY_SUITE_DONE, so a restarted run continues where the last one stopped. If the connection
to gpud dies during a test, that test is blamed and the session stops (every later test would
fail with CUDA_ERROR_DEVICE_UNAVAILABLE for the same reason).
"""

from __future__ import annotations

import json
import os
import time

import pytest

_out = None


def _write(record: dict) -> None:
    global _out
    if _out is None:
        _out = open(os.environ["WOOLY_SUITE_OUT"], "a", buffering=1)
    _out.write(json.dumps(record) + "\n")
    _out.flush()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    path = os.environ.get("WOOLY_SUITE_DONE")
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        done = {line.strip() for line in f if line.strip()}
    items[:] = [it for it in items if it.nodeid not in done]


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A test module that cannot even be imported counts as one error, so it is not silently lost."""
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)[-600:]
        _write(
            {
                "event": "end",
                "id": report.nodeid + "::<collection>",
                "outcome": "error",
                "message": message[:600],
                "t": time.time(),
            }
        )


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    _write({"event": "start", "id": nodeid, "t": time.time()})


def _gpud_alive() -> bool:
    try:
        from shim import runtime

        drv = runtime.current()
        return drv is None or drv.conn.alive
    except Exception:  # noqa: BLE001
        return True


_reports: dict[str, list] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _reports.setdefault(report.nodeid, []).append(report)


def _summarise(reports: list) -> tuple[str, str]:
    outcome, message = "passed", ""
    for r in reports:
        if r.outcome == "skipped":
            outcome = "xfailed" if hasattr(r, "wasxfail") else "skipped"
            message = str(r.longrepr[-1]) if isinstance(r.longrepr, tuple) else str(r.longrepr)
        elif r.outcome == "failed":
            crash = getattr(r.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(r.longrepr)[-600:]
            return ("failed" if r.when == "call" else "error"), message
        elif r.when == "call" and hasattr(r, "wasxfail"):
            outcome = "xpassed"
    return outcome, message


def _wooly_detail() -> str:
    """The detail of the last driver error in this process (cuda.core's messages omit it)."""
    try:
        from shim.native import registry

        last = registry.last_error()
        return f" [wooly: {last[1]}]" if last else ""
    except Exception:  # noqa: BLE001
        return ""


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    outcome, message = _summarise(_reports.pop(nodeid, []))
    if outcome in ("failed", "error") and "CUDA_ERROR" in message:
        message = message.strip().splitlines()[0][:200] + _wooly_detail()
    try:
        from shim.native import registry

        registry._tls.last = None  # each test starts without a stale detail
    except Exception:  # noqa: BLE001
        pass
    if not _gpud_alive():
        outcome, message = "crash", "the connection to gpud died during this test"
    _write({"event": "end", "id": nodeid, "outcome": outcome, "message": message[:600], "t": time.time()})
    if outcome == "crash":
        pytest.exit("gpud connection lost", returncode=3)


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request: pytest.FixtureRequest) -> None:
    """What numba-cuda's repository conftest.py (not shipped in the wheel) provides to CUDATestCase."""
    if request.cls is not None:
        request.cls._dump_failed_filechecks = False
