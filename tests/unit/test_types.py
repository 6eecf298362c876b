"""proto/, shim/ and gpud/ pass mypy with the project's configuration ([tool.mypy] in pyproject.toml: imports of
other packages followed silently, unused ``type: ignore`` comments are errors). Skipped where mypy is absent; the
test extra installs it, so CI runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytest.importorskip("mypy")


@pytest.mark.timeout(600)
def test_the_wire_the_client_and_the_daemon_type_check() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
