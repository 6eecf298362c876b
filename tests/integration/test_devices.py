"""A gpud with several devices (NOTE [session devices] in gpud/server.py): each session runs on one, placed by free
memory unless the program asks for one, and sees it as its only device; a device gpud lacks is CUDA's invalid-device
error. Run against a real gpud offering two CPU devices (``--cpu-devices 2``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.errors import CudaError
from shim.client import Connection
from shim.driver import Driver
from woolyhv.top import admin_call

ROOT = Path(__file__).resolve().parents[2]
DEV_MEM = 256 << 20


@pytest.fixture(scope="module")
def gpud2() -> Iterator[str]:
    from woolyhv.launcher import start_gpud

    endpoint, proc = start_gpud(
        log_level="warning",
        extra_args=["--cpu-devices", "2", "--cpu-memory", str(DEV_MEM), "--tenant", "pinned:devices=1"],
    )
    yield endpoint
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _used(endpoint: str) -> dict[int, int]:
    return {d["ordinal"]: d["used"] for d in admin_call(endpoint)["devices"]}


def _session_device(endpoint: str, conn: Connection) -> int:
    (row,) = [s for s in admin_call(endpoint)["sessions"] if s["session"] == conn.session]
    return int(row["device"])


def test_sessions_spread_by_free_memory(gpud2: str) -> None:
    a = Driver(Connection(gpud2))
    b = c = None
    try:
        assert a.conn.device == 0  # a tie: the lowest ordinal
        assert [d["ordinal"] for d in a.conn.node_devices] == [0, 1]
        assert len(a.conn.devices) == 1 and a.conn.devices[0]["ordinal"] == 0  # its one device
        assert a.device_get_count() == 1
        p = a.mem_alloc(64 << 20)
        a.memcpy_htod(p, bytes(1 << 20))
        a.ctx_synchronize()
        assert _used(gpud2)[0] >= 64 << 20 and _used(gpud2)[1] == 0
        b = Driver(Connection(gpud2))
        assert b.conn.device == 1  # more free memory there
        assert _session_device(gpud2, b.conn) == 1
        q = b.mem_alloc(96 << 20)
        b.memcpy_htod(q, b"\x07" * 4096)
        assert _used(gpud2)[1] >= 96 << 20
        c = Driver(Connection(gpud2))
        assert c.conn.device == 0  # 192 MiB free on device 0 against 160 MiB on device 1
        # the data path is the device's: what b wrote on device 1 reads back
        assert bytes(b.memcpy_dtoh(q, 4096)) == b"\x07" * 4096
    finally:
        for d in (a, b, c):
            if d is not None:
                d.conn.close()


def test_asked_for_device_and_a_missing_one(gpud2: str) -> None:
    d = Driver(Connection(gpud2, device=1))
    try:
        assert d.conn.device == 1 and _session_device(gpud2, d.conn) == 1
        props = d.conn.devices[0]
        assert props["ordinal"] == 1 and props["pci_bus_id"] == "0000:00:01.0"
        assert props["total_mem"] == DEV_MEM
        free, total = d.mem_get_info()
        assert total == DEV_MEM and 0 < free <= DEV_MEM
    finally:
        d.conn.close()
    with pytest.raises(CudaError) as err:
        Connection(gpud2, device=2)
    assert err.value.name == "CUDA_ERROR_INVALID_DEVICE"
    assert "device 2 was asked for, this gpud has 2 device(s)" in err.value.message


def test_a_tenant_policy_narrows_the_devices(gpud2: str) -> None:
    a = Connection(gpud2, tenant="pinned")
    try:
        assert a.device == 1  # the tenant's only device, whatever the other has free
    finally:
        a.close()
    with pytest.raises(CudaError) as err:
        Connection(gpud2, tenant="pinned", device=0)
    assert err.value.name == "CUDA_ERROR_NOT_PERMITTED"
    assert "tenant 'pinned' may use devices [1] only" in err.value.message


@pytest.mark.parametrize("device", [5000, -2, "1", 1.5])
def test_a_hostile_hello_device_is_an_error_and_gpud_serves_on(gpud2: str, device: object) -> None:
    from proto import constants as C
    from proto.codec import encode_body
    from tests.integration.test_bad_input import alive, raw_roundtrip

    hello = {"kind": "hello", "rid": 1, "protocol": C.PROTOCOL_VERSION, "client_version": "x", "device": device}
    body = raw_roundtrip(gpud2, encode_body(hello))
    assert body["kind"] == "error" and body["name"] == "CUDA_ERROR_INVALID_VALUE", body
    assert "device" in body["message"]
    assert alive(gpud2)


def _wooly(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m <args>`` with this checkout importable and ``env`` added."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.update({"OMP_WAIT_POLICY": "PASSIVE", **env})
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=e, timeout=timeout)


def _run(endpoint: str, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _wooly("woolyhv", "run", "python", "-c", code, timeout=180, WOOLY_SERVER=endpoint, **env)


TORCH_PROBE = """
import torch
print("count", torch.cuda.device_count())
print("pci", torch.cuda.get_device_properties(0).pci_device_id)
x = torch.arange(6.0, device="cuda").reshape(2, 3)
print("sum", float((x @ x.T).sum()))
try:
    torch.ones(2, device="cuda:1")
except RuntimeError as exc:
    print("cuda1", str(exc).splitlines()[0])
"""


def test_torch_program_picks_its_device(gpud2: str) -> None:
    pytest.importorskip("torch")
    p = _run(gpud2, TORCH_PROBE, CUDA_VISIBLE_DEVICES="1")
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout
    assert "count 1" in out
    assert "pci 1" in out  # gpud's device 1, the program's only one
    assert "sum 83.0" in out  # [[0,1,2],[3,4,5]] @ its transpose is [[5,14],[14,50]]
    assert "cuda1 CUDA error: invalid device ordinal (cuda:1 requested, 1 device(s) visible" in out
    p = _run(gpud2, "import torch; print('count', torch.cuda.device_count())", WOOLY_DEVICE="7")
    text = p.stdout + p.stderr
    assert "count 0" in text
    assert "CUDA_ERROR_INVALID_DEVICE" in text and "device 7 was asked for" in text


def test_cli_lists_every_device_and_refuses_bad_counts(gpud2: str) -> None:
    p = _wooly("woolyhv", "devices", "--server", gpud2, "--json")
    assert p.returncode == 0, p.stderr
    assert '"index": 1' in p.stdout and '"index": 0' in p.stdout
    gpud = ("gpud", "--listen", "ipc:///tmp/wooly-nodev.sock", "--backend", "cpu")
    p = _wooly(*gpud, "--cpu-devices", "0")
    assert p.returncode != 0
    assert "--cpu-devices=0: expected a whole number of devices from 1 to 64" in p.stderr
    p = _wooly(*gpud, "--tenant", "x:devices=a")
    assert p.returncode != 0
    assert "devices: 'a' is not a list of device ordinals (devices=0;1)" in p.stderr, p.stderr


def test_the_requested_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from shim.runtime import requested_device

    monkeypatch.delenv("WOOLY_EMBEDDED", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert requested_device(-1) == 1 and requested_device(0) == 0  # WOOLY_DEVICE first
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5d1f")
    assert requested_device(-1) == -1  # a UUID: gpud places it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("WOOLY_EMBEDDED", "1")  # wooly run's own gpud applied it already
    assert requested_device(-1) == -1


# NOTE [devices of a program] (shim/runtime.py): a program uses several of gpud's devices at once, one session each.
TWO_DEVICES = """
import sys, torch
print("count", torch.cuda.device_count(), [torch.cuda.get_device_properties(i).pci_device_id for i in range(2)])
a = torch.arange(6.0, device="cuda:0")
b = torch.full((16 << 20,), 2.0, device="cuda:1")  # 64 MiB on the program's cuda:1
print("devices", a.device, b.device, (b * 2).device)
print("alloc", torch.cuda.memory_allocated(0) < (1 << 20), torch.cuda.memory_allocated(1) >= (64 << 20))
c = a.to("cuda:1")
print("moved", c.device, (c + b[:6]).cpu().tolist())
try:
    a + b[:6]
except RuntimeError as exc:
    print("mixed", exc)
print("like", torch.zeros_like(a, device="cuda:1").device, a.new_ones(2, device="cuda:1").device,
      torch.full_like(a, 7, device="cuda:1").cpu().tolist())
with torch.cuda.device(1):
    print("context", torch.zeros(2, device="cuda").device, torch.cuda.current_device())
print("after", torch.cuda.current_device(), torch.ones(1).cuda().device, torch.ones(1).cuda(1).device)
w = torch.arange(3.0, requires_grad=True)
(w.to("cuda:1") ** 2).sum().backward()  # the gradient flows back across the two sessions
print("grad", w.grad.tolist())
try:
    torch.zeros(1, device="cuda:2")
except RuntimeError as exc:
    print("missing", str(exc).splitlines()[0])
print("ready", flush=True)
sys.stdin.readline()
"""


def test_one_program_uses_two_devices(gpud2: str) -> None:
    pytest.importorskip("torch")
    e = dict(os.environ)
    e.update(PYTHONPATH=str(ROOT), OMP_WAIT_POLICY="PASSIVE", WOOLY_SERVER=gpud2)
    e.pop("CUDA_VISIBLE_DEVICES", None)
    cmd = [sys.executable, "-m", "woolyhv", "run", "python", "-c", TWO_DEVICES]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    try:
        lines = []
        assert p.stdout is not None and p.stdin is not None
        while (line := p.stdout.readline()) and not line.startswith("ready"):
            lines.append(line.strip())
        assert line.startswith("ready"), (lines, p.stderr.read() if p.stderr else "")
        used = _used(gpud2)
        assert used[1] >= 64 << 20 > used[0]  # cuda:1's tensor is in gpud's device 1 (a tie placed cuda:0 on 0)
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
    out = "\n".join(lines)
    assert "count 2 [0, 1]" in out
    assert "devices cuda:0 cuda:1 cuda:1" in out
    assert "alloc True True" in out
    assert "moved cuda:1 [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]" in out
    assert (
        "mixed Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1!" in out
    )
    assert "like cuda:1 cuda:1 [7.0, 7.0, 7.0, 7.0, 7.0, 7.0]" in out
    assert "context cuda:1 1" in out
    assert "after 0 cuda:0 cuda:1" in out
    assert "grad [0.0, 2.0, 4.0]" in out
    assert "missing CUDA error: invalid device ordinal (cuda:2 requested, 2 device(s) visible" in out


DATA_PARALLEL = """
import sys, torch, torch.nn as nn
torch.manual_seed(0)
on = sys.argv[1]
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
X, Y = torch.randn(64, 8), torch.randint(0, 3, (64,))
sizes = []
model[0].register_forward_hook(lambda m, i, o: sizes.append(tuple(i[0].shape)))
if on == "cuda":
    model = nn.DataParallel(model).to("cuda:0")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    loss = nn.functional.cross_entropy(model(X.to(on)), Y.to(on))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("loss", repr(loss.item()))
print("replicas", sorted(set(sizes)), len(sizes))
"""


def test_data_parallel_trains_as_on_the_host(gpud2: str) -> None:
    """nn.DataParallel over the program's two devices: scatter, replicate, parallel_apply in threads, gather, and
    the gradient reduction back onto cuda:0 — the losses of the host run, the batch split in two."""
    pytest.importorskip("torch")
    local = subprocess.run(
        [sys.executable, "-c", DATA_PARALLEL, "cpu"], capture_output=True, text=True, timeout=120, cwd=str(ROOT)
    )
    assert local.returncode == 0, local.stderr
    p = _wooly("woolyhv", "run", "python", "-c", DATA_PARALLEL, "cuda", timeout=240, WOOLY_SERVER=gpud2)
    assert p.returncode == 0, p.stderr[-3000:]
    want = [float(x.split()[1]) for x in local.stdout.splitlines() if x.startswith("loss")]
    got = [float(x.split()[1]) for x in p.stdout.splitlines() if x.startswith("loss")]
    assert len(got) == len(want) == 4
    assert got == pytest.approx(want, rel=1e-5)
    assert "replicas [(32, 8)] 8" in p.stdout  # each of 4 steps: two replicas of half the batch
    assert "replicas [(64, 8)] 4" in local.stdout


CHILD_DEVICES = """
import torch, torch.multiprocessing as mp

def child(q):
    q.put([torch.cuda.get_device_properties(i).pci_device_id for i in range(torch.cuda.device_count())])

if __name__ == "__main__":
    here = [torch.cuda.get_device_properties(i).pci_device_id for i in range(torch.cuda.device_count())]
    ballast = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # gpud would place a new session elsewhere
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print("parent", here, "child", q.get(timeout=120))
    p.join(60)
"""


def test_child_processes_number_devices_as_their_parent(gpud2: str, tmp_path: Path) -> None:
    """A spawned child's cuda:0 is its parent's (NOTE [shared tensors]: a tensor it receives is on the device it
    expects; mp.spawn ranks calling set_device(rank) get distinct devices), though gpud would place a new session
    on the other, emptier device."""
    pytest.importorskip("torch")
    script = tmp_path / "children.py"
    script.write_text(CHILD_DEVICES)
    p = _wooly("woolyhv", "run", str(script), timeout=180, WOOLY_SERVER=gpud2)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("parent"))
    _, here, _, there = re.match(r"(parent) (\[.*\]) (child) (\[.*\])", line).groups()  # type: ignore[union-attr]
    assert here == there and len(json.loads(here)) == 2, line


def test_a_tenant_or_cuda_visible_devices_limits_the_devices(gpud2: str) -> None:
    pytest.importorskip("torch")
    probe = (
        "import torch; n = torch.cuda.device_count(); "
        "print('seen', n, [torch.cuda.get_device_properties(i).pci_device_id for i in range(n)])"
    )
    p = _run(gpud2, probe, WOOLY_TENANT="pinned")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "seen 1 [1]" in p.stdout  # the tenant may use device 1 only
    p = _run(gpud2, probe, CUDA_VISIBLE_DEVICES="1,0")
    assert "seen 2 [1, 0]" in p.stdout, p.stdout + p.stderr[-2000:]  # renumbered as CUDA renumbers
    p = _run(gpud2, probe, WOOLY_DEVICE="1")
    assert "seen 1 [1]" in p.stdout, p.stdout + p.stderr[-2000:]


AUTO_MAP = """
import sys, torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
path, on = sys.argv[1], sys.argv[2]
if on == "save":
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    LlamaForCausalLM(cfg).save_pretrained(path)
    sys.exit(0)
if on == "cpu":
    m = AutoModelForCausalLM.from_pretrained(path)
else:  # big-model inference: the layers split over the program's two devices by accelerate
    m = AutoModelForCausalLM.from_pretrained(path, device_map="auto", max_memory={0: "300KB", 1: "10MB"})
    print("map", sorted({str(v) for v in m.hf_device_map.values()}))
ids = torch.tensor([[1, 5, 9, 33, 7]])
print("gen", m.generate(ids.to(m.device), max_new_tokens=8, do_sample=False).tolist())
with torch.no_grad():
    print("logits", m(ids.to(m.device)).logits.float().sum().item())
"""


def test_device_map_auto_splits_a_model_over_two_devices(tmp_path: Path) -> None:
    """transformers' ``device_map="auto"`` (accelerate's hooks move activations between devices): a Llama split
    over cuda:0 and cuda:1 generates what the host run generates. (Devices of 8 GiB: transformers' allocator
    warm-up asks for "total memory - 1.2 GiB", negative on the small devices of ``gpud2``, and so on a real GPU.)"""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from woolyhv.launcher import start_gpud

    endpoint, proc = start_gpud(log_level="warning", extra_args=["--cpu-devices", "2", "--cpu-memory", str(8 << 30)])
    try:
        _device_map_auto(endpoint, tmp_path)
    finally:
        proc.terminate()
        proc.wait(10)


def _device_map_auto(gpud2: str, tmp_path: Path) -> None:
    path = str(tmp_path / "tiny-llama")
    run = [sys.executable, "-c", AUTO_MAP, path]
    env = {**os.environ, "USE_HUB_KERNELS": "0"}
    assert subprocess.run([*run, "save"], capture_output=True, timeout=300, env=env).returncode == 0
    local = subprocess.run([*run, "cpu"], capture_output=True, text=True, timeout=300, env=env)
    assert local.returncode == 0, local.stderr[-2000:]
    p = _wooly("woolyhv", "run", "python", "-c", AUTO_MAP, path, "cuda", timeout=300, WOOLY_SERVER=gpud2)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "map ['0', '1']" in p.stdout

    def pick(out: str, head: str) -> str:
        return next(ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith(head + " "))

    assert pick(p.stdout, "gen") == pick(local.stdout, "gen")  # greedy generation: the same tokens
    assert pick(p.stdout, "logits") == pick(local.stdout, "logits")  # to the bit (grouped-query SDPA fused, as here)


DDP_SCRIPT = ROOT / "tests" / "integration" / "torch" / "scripts" / "ddp_train.py"


def _torchrun_here_and_under_wooly(
    script: Path, endpoint: str
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """``torchrun`` of ``script`` with two ranks: on the host ("cpu", Gloo) and under ``wooly run`` ("cuda"). The host
    ranks use as many threads as gpud's torch does (torchrun would give them one each): a kernel that reduces in
    parallel (LayerNorm's weight gradient) sums in per-thread pieces, so its last bit depends on the count."""
    import torch

    run = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    local = subprocess.run(
        [sys.executable, *run, "cpu"], capture_output=True, text=True, timeout=400, cwd=str(ROOT), env=env
    )
    assert local.returncode == 0, local.stderr[-3000:]
    p = _wooly("woolyhv", "run", *run, "cuda", timeout=500, WOOLY_SERVER=endpoint)
    assert p.returncode == 0, p.stderr[-4000:]
    return local, p


def test_distributed_data_parallel_trains_as_on_the_host(gpud2: str) -> None:
    """A torchrun program with two ranks that asks for NCCL (NOTE [collectives] in shim/torch/collectives.py): each
    rank a process and a session of its own, one per device; DistributedDataParallel broadcasts rank 0's parameters,
    reduces the gradients in several buckets (and with find_unused_parameters, whose reducer keeps a pinned host
    map), and trains exactly as the same program on the host with Gloo: every loss equal to the bit, and so the
    parameters; the collectives a program calls by hand give the host's values on
    cuda tensors."""
    pytest.importorskip("torch")
    local, p = _torchrun_here_and_under_wooly(DDP_SCRIPT, gpud2)

    def lines(out: str, prefix: str) -> list[str]:
        return sorted(x for x in out.splitlines() if x.startswith(prefix))

    def losses(out: str) -> list[tuple[str, str]]:  # the two ranks' lines may meet on one line of the shared stdout
        return sorted(re.findall(r"rank(\d) loss ([-+0-9.e]+?)(?=rank|\s|$)", out))

    assert len(losses(local.stdout)) == 14
    assert losses(p.stdout) == losses(local.stdout)  # every rank's every loss
    for key in ("same", "params", "broadcast", "gather_into", "reduce_scatter", "max", "int64"):
        assert lines(p.stdout, key) == lines(local.stdout, key), key
    assert "same True" in p.stdout
    assert "all_reduce [0.0, 3.0, 6.0, 9.0, 12.0, 15.0] cuda" in p.stdout
    assert "recv [7.0, 8.0] cuda" in p.stdout
    assert "avg [1.5, 3.0]" in p.stdout
    assert "backend nccl wooly" in p.stdout  # what the program asked for; PyTorch itself sees the backend


SAVE_TWO = """
import sys, torch
path = sys.argv[1]
if sys.argv[2] == "save":
    a = torch.arange(4.0, device="cuda:0")
    b = torch.arange(3.0, device="cuda:1") * 10
    torch.save({"a": a, "b": b, "tied": b}, path)
else:
    got = torch.load(path)
    print("loaded", {k: (str(v.device), v.tolist()) for k, v in sorted(got.items())})
    print("tied", got["tied"] is got["b"])
"""


def test_save_tags_each_storage_with_its_device_and_load_puts_it_back(gpud2: str, tmp_path: Path) -> None:
    """NOTE [saving]: a GPU's torch.save writes the storage's device (cuda:1), which a PyTorch without wooly reads
    with map_location; torch.load under wooly puts each storage back on its device, a tensor saved twice loaded once; a program that
    has fewer devices gets PyTorch's error for a file from a bigger machine."""
    pytest.importorskip("torch")
    f = str(tmp_path / "two.pt")
    p = _wooly("woolyhv", "run", "python", "-c", SAVE_TWO, f, "save", timeout=180, WOOLY_SERVER=gpud2)
    assert p.returncode == 0, p.stderr[-3000:]
    host = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, torch; locs = []\n"
            "d = torch.load(sys.argv[1], map_location=lambda s, loc: (locs.append(loc), s)[1])\n"
            "print(sorted(locs), d['b'].tolist())",
            f,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert host.returncode == 0, host.stderr
    assert "['cuda:0', 'cuda:1'] [0.0, 10.0, 20.0]" in host.stdout
    p = _wooly("woolyhv", "run", "python", "-c", SAVE_TWO, f, "load", timeout=180, WOOLY_SERVER=gpud2)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (
        "loaded {'a': ('cuda:0', [0.0, 1.0, 2.0, 3.0]), 'b': ('cuda:1', [0.0, 10.0, 20.0]), "
        "'tied': ('cuda:1', [0.0, 10.0, 20.0])}" in p.stdout
    )
    assert "tied True" in p.stdout
    p = _wooly("woolyhv", "run", "python", "-c", SAVE_TWO, f, "load", timeout=180, WOOLY_SERVER=gpud2, WOOLY_DEVICE="0")
    assert p.returncode != 0
    assert "Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() is 1" in p.stderr


TP_SCRIPT = ROOT / "tests" / "integration" / "torch" / "scripts" / "tp_train.py"


def test_tensor_parallel_trains_as_on_the_host(gpud2: str) -> None:
    """DTensor tensor parallelism over a "cuda" DeviceMesh (pytorch/examples' tensor_parallel_example, smaller):
    DeviceMesh sets each rank's device from LOCAL_RANK, parallelize_module shards the weights, the forward and
    backward redistribute through functional collectives, AdamW steps the shards: every loss and the shards equal
    the same program on the host with Gloo to the bit, and no collective work is left registered (a wait on a view
    of a collective's output used to leave its work, and the tensors it holds, behind)."""
    pytest.importorskip("torch")
    local, p = _torchrun_here_and_under_wooly(TP_SCRIPT, gpud2)

    def lines(out: str) -> list[str]:
        return [x for x in out.splitlines() if x.startswith(("loss", "shards", "pending"))]

    assert len(lines(local.stdout)) == 6
    assert lines(p.stdout) == lines(local.stdout)
    assert "pending works 0" in p.stdout and "device cuda" in p.stdout


FSDP2_SCRIPT = ROOT / "tests" / "integration" / "torch" / "scripts" / "fsdp2_train.py"


def test_fsdp2_trains_as_on_the_host(gpud2: str) -> None:
    """FSDP2 (``fully_shard``) over two ranks asking for NCCL: parameters sharded as DTensors, each block's unsharded
    parameters freed after use and grown back before the next all-gather (NOTE [storage resize]), gradients
    reduce-scattered, clipped by their global norm, Adam on the shards: every loss, gradient norm and the full
    parameters equal the same program on the host with Gloo to the bit. Built on the meta device and initialised
    by ``reset_parameters`` on the shards (DTensor's random ops read and move CUDA's Philox state: NOTE [rng
    state]), as pytorch/examples' FSDP2 does, it trains too."""
    pytest.importorskip("torch")
    local, p = _torchrun_here_and_under_wooly(FSDP2_SCRIPT, gpud2)

    def lines(out: str) -> list[str]:
        return [x for x in out.splitlines() if x.startswith(("loss", "params"))]

    assert len(lines(local.stdout)) == 5
    assert [x.replace(" cuda", " cpu") for x in lines(p.stdout)] == lines(local.stdout)
    assert "params" in p.stdout and " cuda" in p.stdout and "allocated True" in p.stdout
    run = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(FSDP2_SCRIPT)]
    p = _wooly("woolyhv", "run", *run, "cuda", "init", timeout=500, WOOLY_SERVER=gpud2)
    assert p.returncode == 0, p.stderr[-4000:]
    losses = [float.fromhex(x.split()[2]) for x in p.stdout.splitlines() if x.startswith("loss")]
    assert len(losses) == 4 and losses[-1] < losses[0], p.stdout


FSDP1_SCRIPT = ROOT / "tests" / "integration" / "torch" / "scripts" / "fsdp1_train.py"


def test_fsdp1_trains_as_ddp_on_the_host(gpud2: str) -> None:
    """FSDP1 (``FullyShardedDataParallel``) over two ranks: its flat parameters resized, moved between storages and
    compared by address through gpud (NOTE [storage resize]); every loss and the full parameters equal DDP with Gloo
    on the host (what full sharding computes; FSDP1 itself wants an accelerator) to the bit."""
    pytest.importorskip("torch")
    local, p = _torchrun_here_and_under_wooly(FSDP1_SCRIPT, gpud2)

    def lines(out: str) -> list[str]:
        return [x for x in out.splitlines() if x.startswith(("loss", "params"))]

    assert len(lines(local.stdout)) == 6
    assert lines(p.stdout) == lines(local.stdout)


def test_hf_trainer_under_torchrun_trains_as_on_the_host(gpud2: str) -> None:
    """Hugging Face's Trainer started by torchrun: accelerate sets up the process group ("nccl" for cuda) and wraps
    the model in DistributedDataParallel with find_unused_parameters; the losses and the evaluation equal the same
    command on the host with Gloo."""
    pytest.importorskip("transformers")
    script = ROOT / "tests" / "integration" / "torch" / "scripts" / "hf_trainer.py"
    local, p = _torchrun_here_and_under_wooly(script, gpud2)

    line = r'\{"device": [^}]*"eval_loss": [^}]*\}'  # the script's own line (the Trainer prints dicts of its own)
    want = json.loads(re.findall(line, local.stdout)[0])
    ranks = [json.loads(x) for x in re.findall(line, p.stdout)]  # each rank prints its line, in either order
    assert sorted(r["device"] for r in ranks) == ["cuda:0", "cuda:1"] and want["device"] == "cpu"
    for got in ranks:
        assert len(got["losses"]) == len(want["losses"]) == 4
        assert got["losses"] == pytest.approx(want["losses"], rel=1e-6)
        assert got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-6)
