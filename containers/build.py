"""Build the woolyhv image from Debian's packages, with no registry: debootstrap, the project's wheels, buildah.

    python -m containers.build [--tag woolyhv:0.1.0] [--work /var/tmp/wooly-image] [--oci-archive out.tar]

NOTE [image build]: the same image as containers/Dockerfile, built where no base image can be pulled:

1. **rootfs**: ``debootstrap --variant=minbase bookworm`` with Debian's Python 3.11 (the interpreter the wheels
   are built for, and its shared ``libpython3.11`` for native programs), ``etcd-server`` (the pool's store runs
   from this image too), ``ca-certificates`` and ``tini`` (PID 1: reaps the JIT's compile workers, forwards
   SIGTERM so gpud leaves its pool at once).
2. **wheels**: ``pip wheel`` of this checkout (with its compiled native face: the image needs no compiler) and
   of every dependency, the CPU build of torch 2.13.0 included; then installed into
   ``/opt/wooly`` (a venv) inside the image with ``--no-index``: nothing is fetched at build time inside the
   image, nothing at run time at all.
3. **image**: ``buildah from scratch``, the rootfs copied in, the venv installed with ``buildah run --isolation
   chroot`` (no OCI runtime or cgroups needed), then configured: user ``wooly`` (uid 10001), ``WORKDIR
   /home/wooly``, volumes for the JIT cache and the sleep/spill directory, a healthcheck, OCI labels with the
   version and revision, ``tini`` as the entrypoint and ``wooly gpud --listen tcp://0.0.0.0:5555`` as the
   command; committed in the docker format (the only one that keeps a HEALTHCHECK).

Which PyTorch (NOTE [one image, one torch]): the image carries the CPU build of torch (about 190 MB installed
of the image's size) because every role needs a torch and the CPU build is the only one that runs everywhere: a
client in a CI job (whose tensors live on the remote gpud anyway), a CPU gpud, and the portable ATen executor of
a GPU gpud. A CUDA or ROCm build costs 2.5-4.5 GB each; carrying both would make one image 8 GB for every
client. A GPU node that wants the vendor's torch for its ATen executor mounts it (``WOOLY_TORCH_PATH``, a
volume holding a ``pip install --target`` of the vendor's build) and gpud puts it first on its path at start.

Each step is skipped when its output exists (``--fresh`` starts over); ``--until rootfs|wheels|image`` stops
after a step (tests/integration/test_container.py runs the whole build once per CI run and caches it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIRROR = os.environ.get("WOOLY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ["python3", "python3-venv", "libpython3.11", "ca-certificates", "etcd-server", "tini", "procps"]
BUILD_ONLY = ["g++"]  # compiles the torch face's CUDA device library ahead of time, then is purged
STEPS = ("rootfs", "wheels", "image")
STORAGE = ["--storage-driver", "vfs"]  # works in any container or VM (no overlay mounts needed)


class BuildError(RuntimeError):
    """A step that failed: which, the command, and the end of its output."""


def _run(step: str, cmd: list[str], **kw: object) -> str:
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if p.returncode != 0:
        tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
        raise BuildError(
            f"{step}: `{' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''}` exited {p.returncode}:\n  "
            + "\n  ".join(tail)
        )
    print(f"  [{step}] {' '.join(cmd[:4])} ... ({time.monotonic() - t0:.0f} s)", flush=True)
    return p.stdout


def version() -> str:
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def revision() -> str:
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def source_id() -> str:
    """The checkout's revision and a hash of its uncommitted changes: what the wheels were built from."""
    import hashlib

    diff = subprocess.run(["git", "-C", ROOT, "diff", "HEAD"], capture_output=True).stdout
    untracked = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "--others", "--exclude-standard"], capture_output=True
    ).stdout
    return revision() + ("" if not (diff or untracked) else "-" + hashlib.sha256(diff + untracked).hexdigest()[:8])


def _done(path: str, stamp: str) -> bool:
    try:
        with open(os.path.join(path, ".wooly-done")) as f:
            return f.read() == stamp
    except OSError:
        return False


def rootfs(work: str) -> str:
    """A Debian bookworm root filesystem with Python and the packages the roles need."""
    path = os.path.join(work, "rootfs")
    stamp = ",".join(PACKAGES)
    if _done(path, stamp):
        return path
    if shutil.which("debootstrap") is None:
        raise BuildError("rootfs: debootstrap is not installed (apt-get install debootstrap)")
    shutil.rmtree(path, ignore_errors=True)
    _run("rootfs", ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", "bookworm", path, MIRROR])
    # what an image does not need: apt's caches and lists, docs and man pages
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "usr/share/doc/*", "usr/share/man/*"):
        for p in glob.glob(os.path.join(path, pattern)):
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    with open(os.path.join(path, ".wooly-done"), "w") as f:
        f.write(stamp)
    return path


def wheels(work: str) -> str:
    """This checkout as a wheel and every dependency downloaded next to it (no network needed afterwards)."""
    path = os.path.join(work, "wheels")
    if _done(path, source_id()):
        return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    # one resolve for the checkout and every dependency, torch pinned first-class (a bare resolve would fetch a
    # multi-GB CUDA build); anything published only as source is built into a wheel here, on the same Debian
    _run("wheels", [sys.executable, "-m", "pip", "wheel", "-q", "-w", path, f"{ROOT}[numba]", "torch==2.13.0"])
    with open(os.path.join(path, ".wooly-done"), "w") as f:
        f.write(source_id())
    return path


def image(work: str, tag: str, oci_archive: str | None) -> dict[str, object]:
    """The image from the rootfs and the wheels; returns what was built (tag, id, size)."""
    for tool in ("buildah", "podman"):
        if shutil.which(tool) is None:
            raise BuildError(f"image: {tool} is not installed (apt-get install buildah podman)")
    fs, whl = os.path.join(work, "rootfs"), os.path.join(work, "wheels")
    b = ["buildah", *STORAGE]
    ctr = _run("image", [*b, "from", "--name", f"wooly-build-{os.getpid()}", "scratch"]).strip()
    try:
        _run("image", [*b, "copy", ctr, fs + "/", "/"])
        run = [*b, "run", "--isolation", "chroot", "-v", f"{whl}:/wheels:ro", ctr, "--"]
        _run(
            "image",
            [
                *run,
                "sh",
                "-c",
                "python3 -m venv /opt/wooly && /opt/wooly/bin/pip install -q --no-index --find-links /wheels "
                "--no-compile torch==2.13.0 'woolyhv[numba]' && "
                # g++ from apt (so that purging it takes its dependencies too), only for this
                f"apt-get update -q >/dev/null && apt-get install -q -y --no-install-recommends {' '.join(BUILD_ONLY)}"
                " >/dev/null && /opt/wooly/bin/python -m shim.torch.device && "
                f"apt-get purge -q -y --auto-remove {' '.join(BUILD_ONLY)} binutils binutils-common >/dev/null && "
                "apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin && "
                "find /opt/wooly -name __pycache__ -prune -exec rm -rf {} + && "
                "useradd --uid 10001 --create-home --shell /usr/sbin/nologin wooly && "
                "mkdir -p /var/cache/wooly /var/lib/wooly && chown wooly /var/cache/wooly /var/lib/wooly && "
                "rm -f /.wooly-done",
            ],
        )
        ver = version()
        _run(
            "image",
            [
                *b,
                "config",
                "--env",
                "PATH=/opt/wooly/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env",
                "WOOLY_JIT_CACHE_DIR=/var/cache/wooly/jit",
                "--env",
                "WOOLY_SPILL_DIR=/var/lib/wooly/spill",
                "--env",
                "PYTHONDONTWRITEBYTECODE=1",
                "--user",
                "wooly",
                "--workingdir",
                "/home/wooly",
                "--volume",
                "/var/cache/wooly",
                "--volume",
                "/var/lib/wooly",
                "--port",
                "5555",
                "--port",
                "9400",
                "--port",
                "7000",
                "--port",
                "9401",
                "--port",
                "2379",
                "--healthcheck",
                "CMD wooly ps --server tcp://127.0.0.1:5555 --json",
                "--healthcheck-interval",
                "30s",
                "--healthcheck-timeout",
                "10s",
                "--healthcheck-retries",
                "3",
                "--label",
                f"org.opencontainers.image.version={ver}",
                "--label",
                f"org.opencontainers.image.revision={revision()}",
                "--label",
                "org.opencontainers.image.title=woolyhv",
                "--label",
                "org.opencontainers.image.description=gpud, the pool controller, etcd and the wooly client",
                "--label",
                "org.opencontainers.image.licenses=Apache-2.0",
                "--entrypoint",
                '["/usr/bin/tini", "--"]',
                "--cmd",
                '["wooly", "gpud", "--listen", "tcp://0.0.0.0:5555"]',
                ctr,
            ],
            env=dict(os.environ, BUILDAH_FORMAT="docker"),
        )  # the OCI format has no HEALTHCHECK
        image_id = _run("image", [*b, "commit", "--format", "docker", "--rm", ctr, tag]).strip().splitlines()[-1]
    except BaseException:
        subprocess.run([*b, "rm", ctr], capture_output=True)
        raise
    info = json.loads(_run("image", ["podman", *STORAGE, "image", "inspect", tag]))[0]
    out: dict[str, object] = {
        "tag": tag,
        "id": image_id[:12],
        "size_mb": round(info["Size"] / 1e6, 1),
        "version": version(),
        "source": source_id(),
    }
    if oci_archive:
        _run("image", ["podman", *STORAGE, "save", "--format", "oci-archive", "-o", oci_archive, tag])
        out["archive"] = oci_archive
        out["archive_mb"] = round(os.path.getsize(oci_archive) / 1e6, 1)
    return out


def build(
    work: str, tag: str, *, until: str = "image", fresh: bool = False, oci_archive: str | None = None
) -> dict[str, object]:
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work, exist_ok=True)
    t0 = time.monotonic()
    result: dict[str, object] = {"rootfs": rootfs(work)}
    if until != "rootfs":
        result["wheels"] = wheels(work)
    if until == "image":
        result |= image(work, tag, oci_archive)
    result["seconds"] = round(time.monotonic() - t0, 1)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", default=f"localhost/woolyhv:{version()}")
    ap.add_argument("--work", default=os.environ.get("WOOLY_IMAGE_WORK", "/var/tmp/wooly-image"))
    ap.add_argument("--until", choices=STEPS, default="image")
    ap.add_argument("--fresh", action="store_true", help="start over (default: reuse finished steps)")
    ap.add_argument("--oci-archive", help="also write the image as an OCI archive here")
    args = ap.parse_args()
    try:
        print(json.dumps(build(args.work, args.tag, until=args.until, fresh=args.fresh, oci_archive=args.oci_archive)))
    except BuildError as exc:
        print(f"containers.build: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
