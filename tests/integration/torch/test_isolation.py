"""Issue 21's attack on one gpud, two tenants: ordinary ATen ops that read past their inputs (unsafe flags,
out-of-range indices, sparse tensors with indices anywhere, rewritten or claimed coalesced) see none of the other tenant's data, gpud keeps
serving, and the victim's data is intact (NOTE [unsafe ops] in gpud/aten_exec.py)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT, _env, check, run_wooly

SCRIPTS = ROOT / "tests" / "integration" / "torch" / "scripts"


def test_another_tenants_tensors_stay_out_of_reach(gpud: str) -> None:
    victim = subprocess.Popen(
        [sys.executable, "-m", "woolyhv", "run", str(SCRIPTS / "tenant_victim.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env({"WOOLY_SERVER": gpud, "WOOLY_TENANT": "victim"}),
        cwd=str(ROOT),
    )
    try:
        assert victim.stdout.readline().strip() == "ready"
        out = check(run_wooly(gpud, SCRIPTS / "tenant_attack.py", env={"WOOLY_TENANT": "mallory"}, timeout=240))
        lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        assert "attacker done" in out and not [k for k, v in lines.items() if "LEAK" in v], out
        # unsafe=True runs as unsafe=False: the ops' own bounds checks refuse the read
        assert "Expected all rows of lengths" in lines["segment_reduce_unsafe"], lines["segment_reduce_unsafe"]
        assert "out of bounds" in lines["raw_index_put_unsafe"], lines["raw_index_put_unsafe"]
        assert "not allowed on gpud" in lines["raw_sparse_unsafe"]
        assert lines["raw_to_sparse"] == "no leak" and lines["csr_indices_rewrite"] == "no leak", lines
        assert "col_indices < ncols" in lines["raw_csr_parts"], lines["raw_csr_parts"]
        assert "not allowed on gpud" in lines["raw_csr_unsafe"], lines["raw_csr_unsafe"]
        assert "size is inconsistent with indices" in lines["raw_sparse_parts"], lines["raw_sparse_parts"]
        assert lines["sparse_indices_rewrite"] == "no leak"
        assert "not coalesced" in lines["raw_coalesced_claim"], lines["raw_coalesced_claim"]
        for name in ("segment_reduce", "index_select", "gather", "embedding", "as_strided", "sparse_coo", "sparse_csr"):
            assert lines[name].startswith("refused"), (name, lines[name])
        stdout, stderr = victim.communicate("go\n", timeout=120)
        assert victim.returncode == 0 and stdout.strip() == "intact", stderr[-2000:]
    finally:
        if victim.poll() is None:
            victim.kill()


def test_memory_an_op_gives_a_tensor_in_place_is_charged() -> None:
    """``resize_``, ``set_`` and a resized ``out=`` argument held memory gpud never charged (a tenant could take the
    device past its quota: measured 256 MiB held with 0 charged); now it is charged, and past the quota the op fails
    with CUDA's out-of-memory error and the tensor is as it was (ATen's own failed resize left the tensor with its
    new shape and no memory, and the next read killed the executor)."""
    from woolyhv.launcher import start_gpud

    endpoint, proc = start_gpud(log_level="warning", extra_args=["--cpu-memory", str(256 << 20)])
    try:
        out = check(run_wooly(endpoint, SCRIPTS / "regrow.py", timeout=180)).splitlines()
    finally:
        proc.terminate()
        proc.wait(10)
    assert out[:3] == ["resize_ 64", "set_ 96 True", "out= 112 4194304"], out
    assert out[3] == "over refused True", out
    assert out[4] == "intact torch.Size([0]) 0.0 112", out
    assert out[5:] == ["huge out of memory", "freed True"], out
