"""The image (containers/build.py, NOTE [image build]): built from Debian's packages here, run as gpud in one
container, used as a CI client from a second one (a torch example and a numba example), and its hygiene (user,
healthcheck, labels, volumes).

Containers run with buildah's chroot isolation: this kind of machine refuses OCI runtimes their rlimits and has a
hybrid cgroup layout crun will not use (podman run fails with ``setrlimit RLIMIT_NPROC: Operation not
permitted``), while chroot isolation needs neither. The image is the same either way; on a machine with a
working runtime ``podman run localhost/woolyhv:VERSION`` serves it as the Dockerfile's image would.

Slow (a first build takes minutes and pulls Debian packages): runs when ``WOOLY_CONTAINER_TEST=1`` (.ci/run sets
it) and the tools are installed. The build is cached under ``WOOLY_IMAGE_WORK`` between runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from tests.conftest import ROOT, free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        os.environ.get("WOOLY_CONTAINER_TEST") != "1", reason="set WOOLY_CONTAINER_TEST=1 to build the image"
    ),
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in ("buildah", "podman", "debootstrap")),
        reason="needs buildah, podman and debootstrap (Debian packages)",
    ),
]
B = ["buildah", "--storage-driver", "vfs"]


@pytest.fixture(scope="module")
def image() -> dict:
    from containers.build import build, version

    tag = f"localhost/woolyhv:{version()}"
    return build(os.environ.get("WOOLY_IMAGE_WORK", "/var/tmp/wooly-image"), tag)


def _container(tag: str, name: str) -> str:
    subprocess.run([*B, "rm", name], capture_output=True)
    return subprocess.run([*B, "from", "--name", name, tag], capture_output=True, text=True, check=True).stdout.strip()


def test_image_is_built_with_its_hygiene(image: dict) -> None:
    info = json.loads(
        subprocess.run(
            ["podman", "--storage-driver", "vfs", "image", "inspect", image["tag"]],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )[0]
    cfg = info["Config"]
    assert cfg["User"] == "wooly"
    assert cfg["Labels"]["org.opencontainers.image.version"] == image["version"]
    assert set(cfg["Volumes"]) == {"/var/cache/wooly", "/var/lib/wooly"}
    assert cfg["Entrypoint"] == ["/usr/bin/tini", "--"] and cfg["Cmd"][:2] == ["wooly", "gpud"]
    health = info.get("Healthcheck") or info.get("HealthCheck") or cfg.get("Healthcheck") or {}
    assert "wooly ps" in " ".join(health.get("Test", [])), info.keys()
    print(f"image {image['tag']} {image['id']}: {image['size_mb']} MB")


def test_gpud_in_one_container_serves_torch_and_numba_from_another(image: dict) -> None:
    keys = tempfile.mkdtemp(prefix="wooly-ckeys-")
    os.chown(keys, 10001, 0)  # the image's user
    os.chmod(keys, 0o700)
    port = free_port()
    gpud = _container(image["tag"], f"wooly-test-gpud-{os.getpid()}")
    client = _container(image["tag"], f"wooly-test-client-{os.getpid()}")
    log = open(os.path.join(keys, "..", f"wooly-gpud-{port}.log"), "wb")  # noqa: SIM115
    server = subprocess.Popen(
        [
            *B,
            "run",
            "--isolation",
            "chroot",
            "-v",
            f"{keys}:/home/wooly/.config/wooly/keys",
            gpud,
            "--",
            "tini",
            "-s",
            "--",
            "wooly",
            "gpud",
            "--listen",
            f"tcp://127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(keys, "server.key")) and time.monotonic() < deadline:
            assert server.poll() is None, open(log.name).read()
            time.sleep(0.2)
        time.sleep(2)
        run = [
            *B,
            "run",
            "--isolation",
            "chroot",
            "-v",
            f"{keys}:/home/wooly/.config/wooly/keys:ro",
            "-v",
            f"{os.path.join(ROOT, 'examples')}:/examples:ro",
            "--env",
            f"WOOLY_SERVER=tcp://127.0.0.1:{port}",
            client,
            "--",
        ]
        torch_run = subprocess.run(
            [*run, "wooly", "run", "/examples/train_mlp.py", "--steps", "3"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert torch_run.returncode == 0, torch_run.stdout[-2000:] + torch_run.stderr[-3000:]
        losses = [float(line.split()[-1]) for line in torch_run.stdout.splitlines() if line.startswith("step ")]
        assert len(losses) == 3 and losses[-1] < losses[0], torch_run.stdout
        assert "without its CUDA device library" not in torch_run.stderr  # prebuilt in the image: no compiler needed
        numba_run = subprocess.run(
            [*run, "wooly", "run", "/examples/numba_kernels.py"], capture_output=True, text=True, timeout=600
        )
        assert numba_run.returncode == 0 and "numba_kernels: OK" in numba_run.stdout, (
            numba_run.stdout + numba_run.stderr[-3000:]
        )
        # the image's healthcheck command, against this gpud
        ps = subprocess.run(
            [*run, "wooly", "ps", "--server", f"tcp://127.0.0.1:{port}", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ps.returncode == 0 and json.loads(ps.stdout)["devices"], ps.stderr
        text = open(log.name).read()
        assert "gpud.backend chosen=cpu" in text and "session.open" in text, text[-2000:]
    finally:
        os.killpg(server.pid, 15)
        server.wait(30)
        log.close()
        for name in (gpud, client):
            subprocess.run([*B, "rm", name], capture_output=True)
        shutil.rmtree(keys, ignore_errors=True)
