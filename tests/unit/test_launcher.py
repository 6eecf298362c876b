"""How ``wooly run`` decides what runs its program: this interpreter (a Python file, ``-m module``, a Python program
on PATH of this environment) or the program itself (a native binary, a script of another interpreter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from woolyhv.launcher import native_program

ROOT = Path(__file__).resolve().parents[2]


def _script(path: Path, first: str, body: str = "") -> Path:
    path.write_text(f"{first}\n{body}")
    path.chmod(0o755)
    return path


def test_python_of_this_environment_runs_here(tmp_path: Path) -> None:
    here = _script(tmp_path / "tool", f"#!{sys.executable}")
    env_here = _script(tmp_path / "tool2", "#!/usr/bin/env python3")
    assert native_program([str(here)]) is None
    assert native_program(["-m", "torch.distributed.run"]) is None
    assert native_program([str(tmp_path / "plain.py")]) is None  # no such file yet: the bootstrap reports it
    which = native_program([str(env_here)])
    py3 = shutil.which("python3")
    assert (which is None) == (py3 is not None and os.path.dirname(py3) == os.path.dirname(sys.executable))


def test_other_interpreters_and_binaries_run_themselves(tmp_path: Path) -> None:
    other = _script(tmp_path / "console", "#!/opt/another-env/bin/python")  # a console script of another venv
    shell = _script(tmp_path / "job.sh", "#!/bin/sh")
    assert native_program([str(other)]) == str(other)
    assert native_program([str(shell)]) == str(shell)
    assert native_program([sys.executable]) == sys.executable  # `wooly run python train.py`: an ELF binary


def test_a_python_program_on_path_is_found(tmp_path: Path) -> None:
    """``wooly run torchrun ...``: a console script named without a path is looked up on PATH."""
    _script(tmp_path / "wooly-test-tool", f"#!{sys.executable}", "import sys\nprint('ran', sys.argv[1:])\n")
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "woolyhv.bootstrap", "wooly-test-tool", "x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "ran ['x']" in p.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "woolyhv.bootstrap", "wooly-no-such-tool"], capture_output=True, text=True, env=env
    )
    assert missing.returncode == 2
    assert "wooly run: wooly-no-such-tool: no such file" in missing.stderr


def test_openmp_threads_sleep_beside_a_gpud_on_this_machine(tmp_path: Path) -> None:
    """The program's OpenMP threads are told to sleep, not spin, when its gpud shares this machine's cores (the
    embedded one, ipc, loopback); a remote gpud's program and a program's own setting are left alone."""
    from woolyhv.launcher import same_host

    assert same_host("ipc:///run/wooly/gpud.sock") and same_host("tcp://127.0.0.1:5555")
    assert same_host("tcp://localhost:5555") and same_host("tcp://[::1]:5555")
    assert not same_host("tcp://10.0.0.7:5555") and not same_host("pool://etcd:2379")
    probe = "import os; print('omp', os.environ.get('OMP_WAIT_POLICY'))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "WOOLY_SERVER")}
    env.update(PYTHONPATH=str(ROOT), WOOLY_INSECURE="1")

    def seen(**extra: str) -> str:
        p = subprocess.run(
            [sys.executable, "-m", "woolyhv", "run", "python", "-c", probe],
            capture_output=True,
            text=True,
            env={**env, **extra},
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        return p.stdout.split("omp ")[-1].strip()

    assert seen(WOOLY_SERVER="tcp://127.0.0.1:9") == "PASSIVE"  # (never connected: the probe makes no CUDA call)
    assert seen(WOOLY_SERVER="tcp://10.0.0.7:9") == "None"
    assert seen(WOOLY_SERVER="tcp://127.0.0.1:9", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
