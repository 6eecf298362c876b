"""containers/k8s: every manifest is valid against the Kubernetes API schemas (kubernetes-validate, offline,
strict: unknown fields fail), and what the manifests ask of wooly (commands, flags, environment variables)
exists in the CLI they run."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "containers", "k8s")
VERSION = "1.30.0"
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("kustomize.config.k8s.io/v1beta1", "Kustomization")}


def docs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            out += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
    return out


def workloads() -> list[dict]:
    return [d for _, d in docs() if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet")]


@pytest.mark.parametrize(
    "doc", [d for _, d in docs()], ids=[f"{f}:{d['kind']}/{d.get('metadata', {}).get('name', '')}" for f, d in docs()]
)
def test_manifest_is_valid_against_the_api_schema(doc: dict) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    if (doc["apiVersion"], doc["kind"]) in CRDS:
        pytest.skip(f"{doc['kind']} is a CRD (not in the core schemas); checked below")
    kv.validate(doc, VERSION, strict=True)


def test_strict_validation_does_catch_a_typo() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    doc = yaml.safe_load(open(os.path.join(K8S, "controller.yaml")).read().split("---")[1])
    doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kv.ValidationError):
        kv.validate(doc, VERSION, strict=True)


def test_kustomization_lists_every_file() -> None:
    (kust,) = [d for f, d in docs() if d["kind"] == "Kustomization"]
    files = {os.path.basename(p) for p in glob.glob(os.path.join(K8S, "*.yaml"))} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files


def test_services_and_monitors_select_something_real() -> None:
    labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads()]
    services = [d for _, d in docs() if d["kind"] == "Service"]
    for svc in services:
        sel = svc["spec"]["selector"]
        assert any(sel.items() <= lab.items() for lab in labels), f"Service {svc['metadata']['name']} selects no pods"
    for mon in (d for _, d in docs() if d["kind"] == "ServiceMonitor"):
        want = mon["spec"]["selector"]["matchLabels"]
        hits = [s for s in services if want.items() <= s["metadata"].get("labels", {}).items()]
        assert hits, f"ServiceMonitor {mon['metadata']['name']} selects no Service"
        ports = {p["name"] for s in hits for p in s["spec"]["ports"]}
        assert all(e["port"] in ports for e in mon["spec"]["endpoints"])


def _help(command: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "woolyhv", command, "--help"],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="400"),
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_commands_flags_and_variables_exist_in_the_cli() -> None:
    checked = 0
    for w in workloads():
        for c in w["spec"]["template"]["spec"]["containers"]:
            if c.get("command", [None])[0] != "wooly":
                continue
            text = _help(c["command"][1])
            for flag in [a for a in c.get("args", []) if a.startswith("--")]:
                assert re.search(rf"{re.escape(flag)}\b", text), f"wooly {c['command'][1]} has no {flag}"
            for env in c.get("env", []):
                if env["name"].startswith("WOOLY_"):
                    assert env["name"] in text, f"wooly {c['command'][1]} reads no {env['name']}"
            checked += 1
    assert checked >= 2


def test_workloads_run_the_image_containers_build_makes() -> None:
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    (kust,) = [d for f, d in docs() if d["kind"] == "Kustomization"]
    assert kust["images"] == [{"name": "woolyhv", "newName": "localhost/woolyhv", "newTag": version}]
    images = {c["image"] for w in workloads() for c in w["spec"]["template"]["spec"]["containers"]}
    assert images == {"woolyhv"}
