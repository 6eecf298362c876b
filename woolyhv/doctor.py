"""``wooly doctor``: is this setup healthy, and if not, what to do — one line a check.

It checks what a program would meet, in the order it meets it: the settings (``WOOLY_*``), the client's versions,
the pool (``pool://``: its controller, leader, nodes), the connection to gpud (reachable, the handshake and key,
versions and protocol), gpud's backend and why (and what this machine's NVML/amdsmi see), the JIT's disk cache,
the native face (the shim's libcuda for nvcc binaries and CuPy), a tiny PTX kernel end to end, and a tiny torch op
under ``wooly run`` (with the torch face's state), with their latencies. With ``WOOLY_SERVER`` unset it checks
against an embedded gpud started for the purpose, as ``wooly run`` would. Exit status 1 when a check failed.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

OK, WARN, FAIL = "ok", "warn", "FAIL"

_PTX = """.version 7.0
.target sm_80
.address_size 64
.visible .entry twice(.param .u64 p, .param .u32 n)
{
  .reg .pred %q; .reg .b32 %r<6>; .reg .f32 %f<3>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x; mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %q, %r5, %r1; @%q bra DONE;
  mul.wide.u32 %rd2, %r5, 4; add.s64 %rd3, %rd1, %rd2;
  ld.global.f32 %f1, [%rd3]; add.f32 %f2, %f1, %f1; st.global.f32 [%rd3], %f2;
DONE:
  ret;
}
"""

_TORCH_PROBE = """
import json, time
t = time.monotonic()
import torch
out = {"torch": torch.__version__, "import_s": round(time.monotonic() - t, 3)}
from shim.torch import device as _dev
out["device_library"] = _dev.why_not() or ("active (over this CUDA build's own)" if _dev.CUDA_BUILD else "active")
t = time.monotonic()
out["available"] = torch.cuda.is_available()
if out["available"]:
    x = torch.arange(4.0, device="cuda")
    out["name"] = torch.cuda.get_device_name(0)
    out["value"] = float((x * 2).sum().item())
    out["first_op_ms"] = round((time.monotonic() - t) * 1e3, 1)
    t = time.monotonic()
    for _ in range(20):
        float((x + 1).sum().item())
    out["op_ms"] = round((time.monotonic() - t) * 1e3 / 20, 2)
print("WOOLY_DOCTOR " + json.dumps(out))
"""


@dataclass
class Check:
    status: str
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:4}  {self.name:11} {self.detail}" + (f"  -> {self.fix}" if self.fix else "")


class Doctor:
    def __init__(self, server: str | None = None, torch_probe: bool = True) -> None:
        self.server = server
        self.torch_probe = torch_probe
        self.checks: list[Check] = []
        self.endpoint = ""
        self.conn: Any = None
        self._embedded: Any = None

    def add(self, status: str, name: str, detail: str, fix: str = "") -> Check:
        c = Check(status, name, " ".join(detail.split()), fix)
        self.checks.append(c)
        return c

    # ------------------------------------------------------------------ checks, in order
    def run(self, say: Callable[[Check], None] = lambda c: None) -> list[Check]:
        steps = [self.settings, self.client, self.connect, self.backend, self.jit_cache, self.native_face, self.kernel]
        if self.torch_probe:
            steps.append(self.torch_op)
        try:
            for step in steps:
                before = len(self.checks)
                try:
                    stop = step()
                except Exception as exc:  # noqa: BLE001 - a check that crashes is a finding, not a traceback
                    self.add(FAIL, step.__name__, f"{type(exc).__name__}: {exc}")
                    stop = False
                for c in self.checks[before:]:
                    say(c)
                if stop:
                    break
        finally:
            if self.conn is not None:
                self.conn.close()
            if self._embedded is not None:
                self._embedded.terminate()
                self._embedded.wait(10)
        return self.checks

    def settings(self) -> bool:
        from proto.settings import ConfigError
        from proto.settings import client as settings

        try:
            self.s = settings()
        except ConfigError as exc:
            self.add(FAIL, "settings", str(exc), "fix or unset that variable")
            return True
        if self.server is not None:
            self.s.server = self.server
        self.add(OK, "settings", f"WOOLY_SERVER={self.s.server or '(unset: embedded gpud)'}, tenant {self.s.tenant!r}")
        return False

    def client(self) -> bool:
        import zmq

        import woolyhv

        parts = [f"woolyhv {woolyhv.__version__}", f"python {sys.version.split()[0]}", f"pyzmq {zmq.pyzmq_version()}"]
        for mod in ("torch", "numba", "cupy"):
            try:
                m = __import__(mod) if mod != "torch" else None
                if mod == "torch":
                    from importlib.metadata import version

                    parts.append(f"torch {version('torch')}")
                else:
                    parts.append(f"{mod} {m.__version__}")  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - optional faces
                pass
        self.add(OK, "client", ", ".join(parts))
        return False

    def connect(self) -> bool:
        from proto.errors import CudaError
        from shim.client import Connection

        s = self.s
        from shim.runtime import requested_device

        endpoint, key, reservation, device = s.server, "", "", requested_device(s.device)
        if not endpoint:
            from woolyhv.launcher import start_gpud

            t = time.monotonic()
            endpoint, self._embedded = start_gpud(owner_pid=os.getpid(), log_level="warning")
            self.add(
                OK,
                "gpud",
                f"embedded gpud started at {endpoint} in {time.monotonic() - t:.1f} s (as `wooly run` "
                "does with WOOLY_SERVER unset)",
            )
        elif endpoint.startswith("pool://"):
            from woolyhv.pool.client import PoolClient, PoolError
            from woolyhv.pool.model import PlaceRequest

            pc = PoolClient(endpoint, timeout_s=min(s.connect_timeout_s, 5.0))
            try:
                from woolyhv.pool import protocol as P

                st = pc.call(P.Status())
                leader = (st.get("leader") or {}).get("id", "none")
                self.add(
                    OK if st["nodes"] else WARN,
                    "pool",
                    f"controller {st['id']}, leader {leader}, {st['nodes']} node(s), {len(st['pending'])} waiting",
                    "" if st["nodes"] else "start gpud nodes with --join",
                )
                placed = pc.place(PlaceRequest(tenant=s.tenant, memory=1 << 20, deadline_s=5.0, program="wooly doctor"))
                endpoint, key, reservation = placed.endpoint, placed.server_key, placed.reservation
                device = placed.device
                self.add(OK, "placement", f"node {placed.node} at {endpoint} (decision {placed.decision})")
            except PoolError as exc:
                self.add(
                    FAIL,
                    "pool",
                    f"{exc.name}: {exc}",
                    "is `wooly controller` running there, and WOOLY_SERVER_KEY the pool's key?",
                )
                return True
            finally:
                pc.close()
        self.endpoint = endpoint
        t = time.monotonic()
        try:
            self.conn = Connection(
                endpoint,
                tenant=s.tenant,
                token=s.token,
                timeout_s=s.timeout_s,
                connect_timeout_s=min(s.connect_timeout_s, 5.0),
                probe_s=s.probe_s,
                server_key=key,
                reservation=reservation,
                device=device,
                program="wooly doctor",
            )
        except CudaError as exc:
            fix = {
                "CUDA_ERROR_NO_DEVICE": f"start gpud there (`wooly gpud --listen {endpoint}`) or fix WOOLY_SERVER",
                "CUDA_ERROR_NOT_SUPPORTED": "install the same woolyhv version on both sides",
            }.get(exc.name, "")
            if "WOOLY_SERVER_KEY" in exc.message and not fix:
                fix = "export WOOLY_SERVER_KEY=<the output of `wooly keys` on gpud's host>"
            self.add(FAIL, "connection", f"{exc.name}: {exc.message}", fix)
            return True
        c = self.conn
        from proto.constants import PROTOCOL_VERSION

        where = "same host (shared-memory copies)" if c.same_host else "remote"
        self.add(
            OK,
            "connection",
            f"gpud {c.server_version} at {endpoint}, protocol {PROTOCOL_VERSION}, session "
            f"{c.session}, {where}, hello in {(time.monotonic() - t) * 1e3:.0f} ms",
        )
        return False

    def backend(self) -> bool:
        from gpud import discovery

        devs = self.conn.node_devices
        names = ", ".join(
            f"{d['backend']}:{d['name']}"
            + (" (this session's)" if len(devs) > 1 and d["ordinal"] == self.conn.device else "")
            for d in devs
        )
        nv, nv_note = discovery.nvidia()
        status, fix = OK, ""
        if devs and all(d["backend"] == "cpu" for d in devs):
            detail = f"{names}: PTX runs through the JIT on the CPU"
            if nv and (not self.s.server or self.conn.same_host):
                status, fix = WARN, "NVML sees NVIDIA GPUs here: start gpud with --backend nvidia"
        else:
            detail = names
        self.add(status, "backend", f"{detail}; this machine: nvidia {nv_note}", fix)
        return False

    def jit_cache(self) -> bool:
        from jit import disk_cache

        st = disk_cache.stats()
        path = st["dir"]
        parent = path if os.path.isdir(path) else os.path.dirname(path)
        if st["enabled"] and not os.access(parent, os.W_OK):
            self.add(FAIL, "jit cache", f"{path} is not writable", "set WOOLY_JIT_CACHE_DIR to a writable directory")
        else:
            bound = f"{st['max_bytes'] >> 20} MiB" if st["max_bytes"] else "no bound"
            self.add(
                OK if st["enabled"] else WARN,
                "jit cache",
                f"{path}: {st['entries']} module(s), "
                f"{st['bytes'] >> 20} MiB of {bound}" + ("" if st["enabled"] else " (disabled)"),
                "" if st["enabled"] else "unset WOOLY_JIT_CACHE=0: every kernel is compiled again each run",
            )
        return False

    def native_face(self) -> bool:
        try:
            from shim.native import build

            lib = build.ensure_built()
            self.add(
                OK,
                "native",
                f"libcuda.so.1 and libnvidia-ml.so.1 shims in {lib} (nvcc binaries, CuPy, "
                "cuda-python under `wooly run`)",
            )
        except Exception as exc:  # noqa: BLE001
            self.add(
                WARN, "native", f"no native face: {exc}", "install a C compiler (gcc) or reinstall woolyhv from a wheel"
            )
        return False

    def kernel(self) -> bool:
        from shim.driver import Driver

        d = Driver(self.conn)
        t = time.monotonic()
        n = 1024
        p = d.mem_alloc(4 * n)
        d.memcpy_htod(p, struct.pack(f"<{n}f", *range(n)))
        mod = d.module_load_data(_PTX)
        fn = d.module_get_function(mod, "twice")
        compile_ms = (time.monotonic() - t) * 1e3
        t = time.monotonic()
        d.launch_kernel(fn, (n // 256, 1, 1), (256, 1, 1), fn.pack_params([struct.pack("<Q", p), struct.pack("<I", n)]))
        out = struct.unpack(f"<{n}f", bytes(d.memcpy_dtoh(p, 4 * n)))
        run_ms = (time.monotonic() - t) * 1e3
        d.mem_free(p)
        if out != tuple(2.0 * i for i in range(n)):
            self.add(FAIL, "kernel", "a PTX kernel ran but wrote wrong values", "report this (wooly version output)")
        else:
            self.add(OK, "kernel", f"PTX load + compile {compile_ms:.0f} ms, launch and copy back {run_ms:.1f} ms")
        return False

    def torch_op(self) -> bool:
        try:
            from importlib.metadata import version

            version("torch")
        except Exception:  # noqa: BLE001
            self.add(
                WARN,
                "torch",
                "torch is not installed: the PyTorch face is off",
                "pip install torch (the CPU build "
                "on a client: pip install torch --index-url https://download.pytorch.org/whl/cpu)",
            )
            return False
        env = dict(os.environ, WOOLY_SERVER=self.s.server or self.endpoint, WOOLY_QUIET="1")
        if self._embedded is not None:
            env["WOOLY_SERVER"] = self.endpoint
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix="_wooly_doctor.py", delete=False) as f:
            f.write(_TORCH_PROBE)
        t = time.monotonic()
        try:
            p = subprocess.run(
                [sys.executable, "-m", "woolyhv", "run", f.name], capture_output=True, text=True, timeout=300, env=env
            )
        finally:
            os.unlink(f.name)
        lines = [line for line in p.stdout.splitlines() if line.startswith("WOOLY_DOCTOR ")]
        if p.returncode != 0 or not lines:
            tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
            self.add(FAIL, "torch", f"a torch op under `wooly run` failed: {tail}")
            return False
        r = json.loads(lines[0][len("WOOLY_DOCTOR ") :])
        if not r["available"]:
            self.add(FAIL, "torch", f"torch {r['torch']}: torch.cuda.is_available() is False under `wooly run`")
        elif r["value"] != 12.0:
            self.add(FAIL, "torch", f"torch {r['torch']}: (arange(4) * 2).sum() gave {r['value']}, not 12")
        else:
            lib = r["device_library"]
            self.add(
                OK if lib.startswith("active") else WARN,
                "torch",
                f"torch {r['torch']} on {r['name']}: first op {r['first_op_ms']} ms, then {r['op_ms']} ms an op "
                f"(a sync each); cuda device library: {lib}; program start {time.monotonic() - t:.1f} s",
                "" if lib.startswith("active") else "install g++ (the face compiles its device library at first use)",
            )
        return False


def main(server: str | None, as_json: bool, torch_probe: bool = True) -> int:
    doc = Doctor(server, torch_probe=torch_probe)
    checks = doc.run(say=(lambda c: None) if as_json else (lambda c: print(c.line(), flush=True)))
    if as_json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    return 1 if any(c.status == FAIL for c in checks) else 0
