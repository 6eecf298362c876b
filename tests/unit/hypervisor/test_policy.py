"""Hypervisor config parsing: sizes, tenant specs, files."""

from __future__ import annotations

import pytest

from gpud.hypervisor.policy import HypervisorConfig, load, parse_size, parse_tenant_spec


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (4096, 4096),
        ("512MiB", 512 << 20),
        ("2GiB", 2 << 30),
        ("1.5 GB", 1_500_000_000),
        (0.25, 0.25),
        ("25%", 0.25),
        ("0.5", 0.5),
    ],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["lots", "-1", -5, 1.5, True, "12XB"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_tenant_spec():
    name, fields = parse_tenant_spec("alice:quota=2GiB,weight=3,priority=4,overcommit=no")
    assert name == "alice" and fields == {"quota": "2GiB", "weight": 3.0, "priority": 4, "overcommit": False}
    with pytest.raises(ValueError):
        parse_tenant_spec(":quota=1")


def test_files_and_flags(tmp_path):
    toml = tmp_path / "hv.toml"
    toml.write_text('[hypervisor]\novercommit_ratio = 1.5\n[tenants.a]\nquota = "1GiB"\nweight = 2\n')
    cfg = load(str(toml), tenant_specs=["a:priority=4", "b:quota=0.5"], metrics_port=9400)
    assert cfg.overcommit_ratio == 1.5 and cfg.metrics_port == 9400
    assert cfg.tenants["a"].quota_bytes(8 << 30) == 1 << 30 and cfg.tenants["a"].weight == 2
    assert cfg.tenants["a"].priority == 4
    assert cfg.tenants["b"].quota_bytes(8 << 30) == 4 << 30
    assert cfg.policy("unknown").priority == 2  # the default template
    yml = tmp_path / "hv.yaml"
    yml.write_text("scheduler:\n  aging_s: 0.5\ntenants:\n  default:\n    priority: 1\n")
    cfg = load(str(yml))
    assert cfg.scheduler.aging_s == 0.5 and cfg.policy("anyone").priority == 1


def test_bad_files_are_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[tenants.a]\npriority = 9\n")
    with pytest.raises(ValueError):
        load(str(bad))
    bad.write_text("[nonsense]\nx = 1\n")
    with pytest.raises(ValueError):
        load(str(bad))
    assert isinstance(load(None), HypervisorConfig)


def test_aten_executors_section(tmp_path):
    cfg = load(None)
    assert cfg.aten.executors and not cfg.aten.permit_unsafe  # on by default: NOTE [executors]
    p = tmp_path / "g.toml"
    p.write_text("[aten]\npermit_unsafe = true\n")
    assert load(str(p)).aten.permit_unsafe
    p.write_text("[aten]\nexecutors = false\npermit_unsafe = true\n")
    with pytest.raises(ValueError, match="permit_unsafe needs aten.executors"):
        load(str(p))
