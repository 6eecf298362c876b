"""NOTE [settings] (proto/settings.py): every ``WOOLY_*`` variable is declared once, read through its side's
settings class, documented by the README's generated table, and a bad value is one line naming it."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

from proto import settings
from proto.settings import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = ("shim", "gpud", "jit", "proto", "woolyhv")
# WOOLY_ names in the code that are not environment variables
NOT_VARIABLES = {"WOOLY_", "WOOLY_DOCTOR", "WOOLY_NATIVE_H"}


def _sources(*suffixes: str) -> list[pathlib.Path]:
    return [p for pkg in PRODUCT for s in suffixes for p in (ROOT / pkg).rglob(f"*{s}")]


def _env_reads(path: pathlib.Path) -> list[str]:
    """``os.environ.get("WOOLY_X")``, ``os.getenv("WOOLY_X")``, ``os.environ["WOOLY_X"]`` (read) in ``path``."""
    out = []

    def wooly(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.startswith("WOOLY_")
        if isinstance(node, ast.JoinedStr) and node.values:
            return wooly(node.values[0])
        return False

    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and node.args and wooly(node.args[0]):
            f = node.func
            if isinstance(f, ast.Attribute) and ((f.attr == "get" and is_environ(f.value)) or f.attr == "getenv"):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and is_environ(node.value)
            and wooly(node.slice)
        ):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def test_no_variable_is_read_around_the_settings() -> None:
    found = [hit for p in _sources(".py") if p != ROOT / "proto" / "settings.py" for hit in _env_reads(p)]
    assert not found, "read these through proto.settings (NOTE [settings]):\n" + "\n".join(found)


def test_the_checker_finds_a_raw_read(tmp_path: pathlib.Path) -> None:
    p = ROOT / "proto" / "_probe_settings.py"
    p.write_text('import os\nx = os.environ.get("WOOLY_SOMETHING", "1")\ny = os.environ[f"WOOLY_{x}"]\n')
    try:
        assert len(_env_reads(p)) == 2
    finally:
        p.unlink()


def test_every_variable_the_code_names_is_declared() -> None:
    known = set(settings.declared()) | set(settings.INTERNAL) | NOT_VARIABLES
    named: dict[str, str] = {}
    for p in _sources(".py", ".c", ".h", ".cpp"):
        for m in re.finditer(r"\bWOOLY_[A-Z0-9_]*", p.read_text(errors="replace")):
            named.setdefault(m.group(0), str(p.relative_to(ROOT)))
    undeclared = {k: v for k, v in named.items() if k not in known}
    assert not undeclared, f"declare these in proto/settings.py: {undeclared}"


def test_the_readme_table_is_the_generated_one() -> None:
    text = (ROOT / "README.md").read_text()
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    assert begin in text and end in text
    copy = text[text.index(begin) + len(begin) : text.index(end)]
    assert copy == settings.markdown_table(), "run `python -m proto.settings` and paste its table into the README"
    out = subprocess.run([sys.executable, "-m", "proto.settings"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout == copy


@pytest.mark.parametrize(
    ("var", "value", "expects"),
    [
        ("WOOLY_TIMEOUT_S", "abc", "expected a number"),
        ("WOOLY_TIMEOUT_S", "-1", "expected a number of seconds > 0"),
        ("WOOLY_TORCH_FLUSH_OPS", "0", "expected a whole number of ops >= 1"),
        ("WOOLY_TORCH_FLUSH_OPS", "2.5", "expected a whole number"),
        ("WOOLY_INSECURE", "maybe", "expected 1/0, true/false, yes/no or on/off"),
        ("WOOLY_MEM", "lots", "expected a size such as 4GiB"),
        ("WOOLY_SERVER", "http://x", "expected an endpoint such as tcp://host:5555"),
        ("WOOLY_PRIORITY", "5000", "expected a whole number from -1000 to 1000"),
        ("WOOLY_BACKEND", "amd", "no ROCm execution backend yet"),
    ],
)
def test_a_bad_client_value_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, expects: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        settings.client()
    msg = str(info.value)
    assert msg.startswith(f"{var}={value!r}: ") and expects in msg and "\n" not in msg
    assert settings.quiet_client().timeout_s > 0  # error paths still get usable settings


@pytest.mark.parametrize(
    ("var", "value", "expects"),
    [
        ("WOOLY_JIT_WORKERS", "0", "expected a whole number of processes from 1 to 256"),
        ("WOOLY_JIT_CACHE_MAX", "12 parsecs", "expected a size"),
        ("WOOLY_JIT_COMPILE_CPU_S", "-3", "expected a number of seconds >= 0"),
        ("WOOLY_JIT_TIERS", "sometimes", "expected 1/0"),
    ],
)
def test_a_bad_jit_value_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, expects: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=f"^{var}=.*{re.escape(expects)}"):
        settings.jit()


def test_values_are_read_again_when_the_environment_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOOLY_JIT_WORKERS", "3")
    assert settings.jit().jit_workers == 3
    assert settings.jit() is settings.jit()  # cached while nothing changes
    monkeypatch.setenv("WOOLY_JIT_WORKERS", "2")
    assert settings.jit().jit_workers == 2
    monkeypatch.setenv("WOOLY_JIT_WORKERS", "")  # empty is unset
    assert settings.jit().jit_workers == 1
    monkeypatch.setenv("WOOLY_JIT_CACHE_MAX", "512MiB")
    assert settings.jit().jit_cache_max == 512 << 20


def test_internal_names_are_checked() -> None:
    with pytest.raises(KeyError):
        settings.internal("WOOLY_TIMEOUT_S")


def test_gpud_refuses_to_start_on_a_bad_variable(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, WOOLY_JIT_COMPILE_WALL_S="soon", PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "gpud", "--listen", f"ipc://{tmp_path}/g.sock", "--backend", "cpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 2
    assert p.stderr.strip() == "wooly: WOOLY_JIT_COMPILE_WALL_S='soon': expected a number of seconds > 0", p.stderr
