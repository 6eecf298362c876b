"""torch.cuda API answers, tensor semantics and errors under ``wooly run``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.torch.conftest import check, json_lines, run_wooly

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module")
def probe(gpud: str) -> dict[str, object]:
    return json_lines(check(run_wooly(gpud, SCRIPTS / "probe_api.py")))


def test_cuda_api(probe: dict[str, object]) -> None:
    assert probe["is_available"] is True and probe["device_count"] == 1 and probe["current"] == 0
    assert "wooly" in str(probe["name"]) and len(probe["capability"]) == 2  # type: ignore[arg-type]
    assert probe["total_memory"] > 0 and probe["bf16"] is True  # type: ignore[operator]
    assert probe["accel"] == "cuda" and probe["accel_available"] is True


def test_memory_accounting(probe: dict[str, object]) -> None:
    assert probe["mem_delta"] == 4 << 20
    assert probe["view_delta"] == 0
    assert probe["freed"] is True and probe["peak_ge"] is True and probe["mem_info_ok"] is True


def test_views_and_inplace_aliasing(probe: dict[str, object]) -> None:
    assert probe["aliasing"] == [[0.0, 1.0, 3.0, 3.0], [0.0, 50.0, 61.0, 70.0], [0.0, 9.0, 11.0, 11.0]]
    assert probe["unsqueeze_shape"] == [1, 3, 4]


def test_devices_and_factories(probe: dict[str, object]) -> None:
    assert probe["tensor_dev"] == "cuda:0" and probe["half"] == "torch.float16" and probe["half_dev"] == "cuda:0"
    assert probe["default_dev"] == "cuda:0" and probe["ctx_dev"] == "cuda:0" and probe["ctx_val"] == [7.0, 7.0]
    assert probe["item"] == 4.0 and probe["to_cpu"] == "cpu" and probe["is_cuda"] is True
    assert probe["bool_index"] == [2.5] and probe["nonzero"] == [0, 1]
    assert "can't convert cuda:0 device type tensor to numpy" in str(probe["numpy_error"])


def test_a_factory_writing_into_a_cuda_tensor(probe: dict[str, object]) -> None:
    assert probe["out_factory"] == [[0.0, 1.0, 2.0, 3.0, 4.0], "cuda:0"]


def test_rng(probe: dict[str, object]) -> None:
    assert probe["rng_repro"] is True and probe["rng_like_cpu"] is True
    assert probe["rng_state"] == [16, "torch.uint8", 123, 123] and probe["rng_offset"] is True


def test_events_printing_modules(probe: dict[str, object]) -> None:
    assert probe["elapsed_ok"] is True
    assert probe["printed"] == "tensor([1., 1.], device='cuda:0')"
    assert probe["param_type"] is True and probe["grad_dev"] == "cuda:0" and probe["param_dev"] == "cuda:0"
    assert probe["inference_ok"] is True and probe["compile_ok"] is True


def test_optimizer_flags(probe: dict[str, object]) -> None:
    assert probe["sgd_foreach"] is True and probe["adam_foreach"] is True and probe["adamw_fused"] is True


def test_mnist_shaped_script(gpud: str) -> None:
    """A script shaped like pytorch/examples mnist: DataLoader workers + pin_memory, dropout, Adadelta."""
    out = check(run_wooly(gpud, SCRIPTS / "mnist_like.py"))
    assert "Test set: Average loss" in out and "loads back on cuda:0" in out


def test_autocast_casts(probe: dict[str, object]) -> None:
    assert probe["autocast"] == ["torch.bfloat16", "torch.float32", "torch.float32", "torch.float32"]
    assert probe["scaler_scale"] == 65536.0


def test_semantics_match_local(gpud: str) -> None:
    from tests.integration.torch.conftest import run_local

    local = check(run_local(SCRIPTS / "semantics.py"))
    remote = check(run_wooly(gpud, SCRIPTS / "semantics.py"))
    assert remote.splitlines() == local.splitlines()


def test_sparse_graph_code_matches_local(gpud: str) -> None:
    """NOTE [sparse tensors] (gpud/aten_sparse.py): a GCN over sparse COO features and adjacency trains as on the
    host, sparse ops and the way back agree, and an index out of range is refused however the tensor is built."""
    from tests.integration.torch.conftest import run_local

    remote = check(run_wooly(gpud, SCRIPTS / "sparse_gcn.py", "cuda")).splitlines()
    local = check(run_local(SCRIPTS / "sparse_gcn.py", "cpu")).splitlines()
    # on the host, writing into s._indices() changes s, and torch.sparse_coo_tensor does not check indices unless
    # asked to (check_invariants): gpud keeps its own copy of the indices and checks them
    own = ("layout", "out_of_range", "made", "indices_private")
    shared = [ln for ln in remote if not ln.startswith(own)]
    assert shared == [ln for ln in local if not ln.startswith(own)]
    assert len(shared) == 13 and "indices_private True" in remote
    assert "layout torch.sparse_coo torch.sparse_coo True 2 0 True" in remote
    assert "made cuda [0.0, 0.0, 5.0]" in remote
    assert [ln for ln in remote if ln.startswith("out_of_range")] == ["out_of_range refused True"] * 2


def test_compressed_sparse_code_matches_local(gpud: str) -> None:
    """NOTE [sparse tensors]: CSR/CSC/BSR tensors on cuda: a GCN over a CSR adjacency trains as on the host,
    sparse.mm with reductions and its gradients, layout conversions both ways and the parts agree; parts that
    break the invariants are refused, and the parts a program gets are copies."""
    from tests.integration.torch.conftest import run_local

    remote = check(run_wooly(gpud, SCRIPTS / "sparse_csr.py", "cuda")).splitlines()
    local = check(run_local(SCRIPTS / "sparse_csr.py", "cpu")).splitlines()
    shared = [ln for ln in remote if not ln.startswith("own")]
    assert shared == [ln for ln in local if not ln.startswith("own")]
    assert len(shared) == 18 and "layout torch.sparse_csr torch.Size([50, 50]) True 2 0" in remote
    assert "own out_of_range refused True" in remote and "own indices_private True" in remote


def test_python_children_of_the_program_use_cuda(gpud: str) -> None:
    """NOTE [child interpreters] (shim/autostart/sitecustomize.py): a subprocess of sys.executable and spawned
    torch.multiprocessing workers get the PyTorch face; each is a session of its own."""
    out = check(run_wooly(gpud, SCRIPTS / "children.py", timeout=240)).splitlines()
    assert "subprocess 0 True cuda:0 83.0" in out[0], out
    assert out[1] == "spawn [(0, 'cuda:0', 4.0), (1, 'cuda:0', 8.0)] [0, 0]", out
    assert out[2] == "parent 2.0", out
    assert out[3] == "fork exited", out


def test_cuda_tensors_sent_to_workers_are_shared_as_on_the_host(gpud: str) -> None:
    """NOTE [shared tensors] (gpud/aten_share.py): spawned workers train the parent's model in place (hogwild) and
    send back tensors they made, which outlive them; the parameters equal the host run's (CPU tensors in shared
    memory) to the bit, and the workers' tensors are charged to the parent once the workers are gone."""
    from tests.integration.torch.conftest import run_local

    remote = check(run_wooly(gpud, SCRIPTS / "shared.py", timeout=300)).splitlines()
    local = check(run_local(SCRIPTS / "shared.py", timeout=300)).splitlines()
    assert [ln.replace("on cuda", "on cpu") for ln in remote if not ln.startswith(("made", "memory"))] == [
        ln for ln in local if not ln.startswith("made")
    ]
    assert sum(ln.startswith("param ") and ln.endswith(" True True") for ln in remote) == 4, remote
    assert "made [1000.0, 2000.0] ['cuda', 'cuda']" in remote and "memory 8000" in remote, remote
    assert "after [2.0, 2.0, 2.0] True" in remote


SHARER = """
import sys, torch
from proto import aten as W
from shim.torch import stream as S
t = torch.arange(4.0, device="cuda")
token, _ = S.for_tensor(t).call([W.OP_SHARE_EXPORT, [t._x], {"scope": ["mallory", 0]}, []])
print(token, flush=True)
sys.stdin.readline()
print("after", t.tolist(), flush=True)
"""


def test_a_shared_tensor_is_only_the_tenants_and_only_once(gpud: str, tmp_path: Path) -> None:
    """A token works in a session of the tenant that made it, once; the scope a client writes is replaced by gpud's
    (the share ops are synchronous calls, refused in a batch)."""
    import subprocess
    import sys

    from proto import aten as W
    from proto import errors as codes
    from proto import messages as m
    from proto.errors import CudaError
    from shim.client import Connection
    from tests.integration.torch.conftest import _env

    script = tmp_path / "sharer.py"
    script.write_text(SHARER)
    env = _env({"WOOLY_SERVER": gpud, "WOOLY_TENANT": "victim"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "woolyhv", "run", str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        token = proc.stdout.readline().strip()
        assert len(token) == 32, proc.stderr.read() if proc.stderr else ""

        def receive(tenant: str) -> object:
            conn = Connection(gpud, tenant=tenant)
            try:
                op = [W.OP_SHARE_IMPORT, [token], {"scope": ["victim", 0]}, []]
                return conn.call(m.AtenCall(op=op))[0]
            finally:
                conn.close()

        with pytest.raises(CudaError) as err:
            receive("mallory")
        assert err.value.code == codes.INVALID_HANDLE and "no cuda tensor is shared under this token" in str(err.value)
        conn = Connection(gpud, tenant="victim")
        try:
            conn.post(m.AtenBatch(ops=[[W.OP_SHARE_IMPORT, [token], {"scope": ["victim", 0]}, [5]]]))
            with pytest.raises(CudaError) as err:
                conn.call(m.AtenCall(op=[W.OP_SYNC, [], {}, []]))
            assert err.value.code == codes.NOT_PERMITTED and "is a synchronous call" in str(err.value)
            got = conn.call(m.AtenCall(op=[W.OP_SHARE_IMPORT, [token], {}, []]))[0]
            h, shape, _, _, dtype = got["t"]  # type: ignore[index]
            assert shape == [4] and dtype == "float32"
            conn.call(m.AtenCall(op=["aten.fill_.Scalar", [W.tensor_ref(h), 9.0], {}, []]))  # the sharer sees it
        finally:
            conn.close()
        with pytest.raises(CudaError) as err:
            receive("victim")  # once only
        assert err.value.code == codes.INVALID_HANDLE
        out, errs = proc.communicate("go\n", timeout=60)
        assert "after [9.0, 9.0, 9.0, 9.0]" in out, errs[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
