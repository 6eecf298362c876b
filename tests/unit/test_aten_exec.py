"""gpud's ATen executor on hostile input: every bad op is a CUDA error, never a crash."""

from __future__ import annotations

import msgpack
import pytest

torch = pytest.importorskip("torch")

from gpud.aten_exec import Executor, Host  # noqa: E402
from gpud.errors import CudaError  # noqa: E402
from proto import aten as W  # noqa: E402


class _Host(Host):
    """What the executor asks of its process (aten_exec.Host): a quota of ``limit`` bytes and an error list."""

    def __init__(self, limit: int = 1 << 30) -> None:
        self.limit, self.used = limit, 0
        self.errors: list[CudaError] = []

    def charge(self, n: int) -> None:
        if self.used + n > self.limit:
            raise CudaError(2, "quota")
        self.used += n

    def uncharge(self, n: int) -> None:
        self.used -= n

    def record_error(self, e: CudaError) -> None:
        self.errors.append(e)


def ref(h: int) -> msgpack.ExtType:
    return msgpack.ExtType(W.EXT_TENSOR, h.to_bytes(8, "little"))


def make(limit: int = 1 << 30) -> tuple[Executor, _Host]:
    s = _Host(limit)
    return Executor(s, "cpu"), s


def test_runs_ops_and_accounts_storage() -> None:
    ex, s = make()
    f32 = msgpack.ExtType(W.EXT_DTYPE, b"float32")
    ex.run_batch(
        [
            ["aten.ones.default", [[4, 4]], {"dtype": f32}, [1]],
            ["aten.view.default", [ref(1), [16]], {}, [2]],
            ["aten.add.Tensor", [ref(1), ref(1)], {}, [3]],
        ],
        [],
        0,
    )
    assert not s.errors
    assert s.used == 2 * 64  # the view shares its base's storage
    ex.run_batch([[W.OP_FREE, [1, 2, 3], {}, []]], [], 0)
    assert s.used == 0


@pytest.mark.parametrize(
    "op",
    [
        ["os.system", ["ls"], {}, []],
        ["aten.from_file", ["/etc/passwd"], {}, [1]],
        ["aten._unsafe_index.Tensor", [], {}, [1]],
        ["aten.no_such_op", [], {}, [1]],
        ["aten.__dict__.keys", [], {}, [1]],
        ["aten.__class__", [], {}, [1]],
        ["aten.add.Tensor", [ref(99), ref(98)], {}, [1]],
        ["aten.add.Tensor", [msgpack.ExtType(77, b"x")], {}, [1]],
        ["aten.add.Tensor", [], {}, [1]],
        ["aten.ones.default", [[2]], {}, [0xFFFFFFFFFFFFFFFF]],
        ["aten.ones.default", [[2]], {}, []],
        [W.OP_UPLOAD, [5, "float32", [2]], {}, [1]],
        [W.OP_UPLOAD, [0, "float32", [3]], {}, [1]],
        [W.OP_SEED, ["x"], {}, []],
        ["wooly.nope", [], {}, []],
        [["nested"], "args", 3, None],
    ],
)
def test_bad_ops_become_errors(op: list[object]) -> None:
    ex, s = make()
    ex.run_batch([op], [b"\x00" * 4], 0)
    assert len(s.errors) == 1 and isinstance(s.errors[0], CudaError)
    ex.run_batch([["aten.ones.default", [[2]], {}, [7]]], [], 0)  # the executor still works
    assert len(s.errors) == 1 and 7 in ex.tensors


I64 = msgpack.ExtType(W.EXT_DTYPE, b"int64")


@pytest.mark.parametrize(
    "op,code,needle",
    [
        # the cross-tenant read of issue 21: lengths far past the data, bounds checks switched off; gpud switches
        # them back on (unsafe=False), and the op's own check refuses
        (
            ["aten.segment_reduce.default", [ref(1), "sum"], {"lengths": ref(2), "unsafe": True}, [9]],
            1,
            "when !unsafe",
        ),
        (["aten.segment_reduce.default", [ref(1), "sum", None, None, ref(2), 0, True], {}, [9]], 1, "positional"),
        (["aten.segment_reduce.default", [ref(1), "sum"], {"lengths": ref(2)}, [9]], 1, "Expected all rows of lengths"),
        (["aten._index_put_impl_.default", [ref(1), [ref(3)], ref(4), False, True], {}, [0]], 1, "out of bounds"),
        (["aten._sparse_coo_tensor_unsafe.default", [ref(2), ref(1), [4]], {}, [9]], 800, "not allowed"),
        # index conversions that trust their (dense) inputs as a sparse tensor's: each crashed an executor
        (["aten._convert_indices_from_coo_to_csr.default", [ref(2), 1], {}, [9]], 1, "within [0, 1)"),
        (["aten._convert_indices_from_csr_to_coo.default", [ref(2), ref(2)], {}, [9]], 1, "must rise from 0"),
        (
            ["aten._sparse_coo_tensor_with_dims_and_tensors.default", [1, 0, [4], ref(2), ref(1)], {}, [9]],
            1,
            "indices must be an int64 tensor of shape (sparse_dim=1, nnz)",
        ),
    ],
)
def test_unsafe_ops_are_refused(op: list[object], code: int, needle: str) -> None:
    """NOTE [unsafe ops]: nothing that skips bounds checks runs, and no sparse tensor is kept."""
    ex, s = make()
    ex.run_batch(
        [
            ["aten.arange.default", [4.0], {}, [1]],
            ["aten.ones.default", [[65536]], {"dtype": I64}, [2]],
            ["aten.full.default", [[1], 1 << 20], {"dtype": I64}, [3]],
            ["aten.ones.default", [[1]], {}, [4]],
        ],
        [],
        0,
    )
    ex.run_batch([op], [], 0)
    assert len(s.errors) == 1 and s.errors[0].code == code and needle in s.errors[0].message, s.errors
    assert 9 not in ex.tensors and ex.tensors[1].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_unchecked_index_ops_run_checked() -> None:
    """NOTE [checked equivalents] (gpud/aten_guards.py): ``_unsafe_*index*`` give ATen's results for indices in
    range, and an error naming the op (never a read or write past the tensor) for indices out of it."""
    ex, s = make()
    ex.run_batch(
        [
            ["aten.arange.default", [4.0], {}, [1]],  # 0. 1. 2. 3.
            ["aten.arange.default", [4], {}, [2]],  # int64 0 1 2 3
            ["aten.add.Scalar", [ref(2), 1 << 20], {}, [3]],  # far past the end
            ["aten.lt.Scalar", [ref(2), 2], {}, [4]],  # mask: True True False False
            ["aten.add.Scalar", [ref(2), -2], {}, [5]],  # -2 -1 0 1
            ["aten.ones.default", [[4]], {}, [6]],
        ],
        [],
        0,
    )
    ok = [
        (["aten._unsafe_index.Tensor", [ref(1), [ref(5)]], {}, [10]], [2.0, 3.0, 0.0, 1.0]),
        # masked out: index 1<<20 (or 1<<20 + 1 ...) is never read, the fill stands there
        (["aten._unsafe_masked_index.default", [ref(1), ref(4), [ref(3)], -1.0], {}, [11]], [3.0, 3.0, -1.0, -1.0]),
        (["aten._unsafe_index_put.default", [ref(1), [ref(2)], ref(6), True], {}, [12]], [1.0, 2.0, 3.0, 4.0]),
        (
            ["aten._unsafe_masked_index_put_accumulate.default", [ref(1), ref(4), [ref(3)], ref(6)], {}, [13]],
            [0.0, 1.0, 2.0, 5.0],  # both unmasked 1s land on the clamped index 3, the masked ones nowhere
        ),
    ]
    for op, want in ok:
        ex.run_batch([op], [], 0)
        assert not s.errors and ex.tensors[op[3][0]].tolist() == want, (op[0], s.errors)
    bad = [
        ["aten._unsafe_index.Tensor", [ref(1), [ref(3)]], {}, [20]],
        ["aten._unsafe_index_put.default", [ref(1), [ref(3)], ref(6), False], {}, [21]],
    ]
    for op in bad:
        ex.run_batch([op], [], 0)
        assert s.errors and "out of bounds" in s.errors[-1].message and op[3][0] not in ex.tensors, s.errors
    assert ex.tensors[1].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_sparse_tensors_keep_indices_nobody_else_holds() -> None:
    """NOTE [sparse tensors] (gpud/aten_sparse.py): built from parts only after a check, on gpud's own copy of the
    indices; _indices() hands out copies; the coalesced flag cannot lie; compressed layouts are refused."""
    ex, s = make()
    ex.run_batch(
        [
            ["aten.arange.default", [3], {}, [1]],  # 0 1 2 (int64)
            ["aten.ones.default", [[3]], {}, [2]],
            ["aten.view.default", [ref(1), [1, 3]], {}, [3]],  # indices (1, nnz=3)
        ],
        [],
        0,
    )
    build = "aten._sparse_coo_tensor_with_dims_and_tensors.default"
    ex.run_batch([[build, [1, 0, [2], ref(3), ref(2)], {}, [9]]], [], 0)  # index 2 in a dimension of 2
    assert len(s.errors) == 1 and "size is inconsistent with indices" in s.errors[0].message and 9 not in ex.tensors
    ex.run_batch([[build, [1, 0, [3], ref(3), ref(2)], {"is_coalesced": True}, [9]]], [], 0)
    sp = ex.tensors[9]
    assert sp.is_sparse and sp._indices().data_ptr() != ex.tensors[1].data_ptr()  # its own copy
    ex.run_batch([["aten.fill_.Scalar", [ref(1), 7], {}, [0]]], [], 0)  # rewrite what the client named as indices
    assert sp.to_dense().tolist() == [1.0, 1.0, 1.0]
    ex.run_batch([["aten._indices.default", [ref(9)], {}, [10]]], [], 0)
    assert ex.tensors[10].data_ptr() != sp._indices().data_ptr() and ex.tensors[10].tolist() == [[0, 1, 2]]
    value, _ = ex.run_call(["aten.add.Tensor", [ref(9), ref(9)], {}, []], [], 0)
    h, shape, sdim, ddim, nnz, coalesced, dt = value["s"]
    assert (shape, sdim, ddim, nnz, dt) == ([3], 1, 0, 3, "float32") and ex.tensors[h].is_sparse
    # the same index twice: not coalesced, and the flag may not say it is
    ex.run_batch([["aten.zeros.default", [[1, 2]], {"dtype": I64}, [11]]], [], 0)
    ex.run_batch([[build, [1, 0, [3], ref(11), ref(2)], {}, [12]]], [], 0)  # values of 3 for nnz 2: refused
    assert "do not describe one tensor" in s.errors[-1].message and 12 not in ex.tensors
    ex.run_batch([["aten.ones.default", [[2]], {}, [13]], [build, [1, 0, [3], ref(11), ref(13)], {}, [12]]], [], 0)
    ex.run_batch([["aten._coalesced_.default", [ref(12), True], {}, [0]]], [], 0)
    assert "not coalesced" in s.errors[-1].message and not ex.tensors[12].is_coalesced()


def test_compressed_sparse_tensors_keep_indices_nobody_else_holds() -> None:
    """NOTE [sparse tensors]: CSR/CSC/BSR/BSC built from parts only after the invariants are checked, on gpud's own
    copies; crow_indices()/col_indices() hand out copies; the unvalidated constructors stay refused."""
    ex, s = make()
    ex.run_batch(
        [
            ["aten.arange.start_step", [0, 3, 2], {}, [7]],  # crow 0 2 (one row of a 1x3: nnz 2)
            ["aten.arange.default", [2], {}, [2]],  # col 0 1
            ["aten.ones.default", [[2]], {}, [3]],
            ["aten.arange.default", [3], {}, [4]],  # col 0 1 2: one more than nnz
            ["aten.arange.start", [2, 4], {}, [5]],  # col 2 3: 3 is past the 3 columns
        ],
        [],
        0,
    )
    build = "aten.sparse_compressed_tensor.comp_plain_value_size"
    csr = msgpack.ExtType(W.EXT_LAYOUT, b"sparse_csr")
    ex.run_batch([[build, [ref(7), ref(5), ref(3), [1, 3]], {"layout": csr}, [9]]], [], 0)
    assert "col_indices < ncols" in s.errors[-1].message and 9 not in ex.tensors
    value, _ = ex.run_call([build, [ref(7), ref(2), ref(3), [1, 3]], {"layout": csr}, []], [], 0)
    h, shape, sdim, ddim, nnz, coalesced, dt, layout = value["s"]
    t = ex.tensors[h]
    assert (shape, sdim, ddim, nnz, dt, layout) == ([1, 3], 2, 0, 2, "float32", "sparse_csr")
    assert t.crow_indices().data_ptr() != ex.tensors[7].data_ptr()  # its own copy
    ex.run_batch([["aten.fill_.Scalar", [ref(2), 5], {}, [0]]], [], 0)  # rewrite what the client named as columns
    assert t.to_dense().tolist() == [[1.0, 1.0, 0.0]]
    value, _ = ex.run_call(["aten.col_indices.default", [ref(h)], {}, []], [], 0)
    assert ex.tensors[value["t"][0]].data_ptr() != t.col_indices().data_ptr()
    # sparse.mm(csr, dense, "amax")'s backward reads values where arg_out says: a forged one is refused
    ex.run_batch(
        [
            ["aten.ones.default", [[3, 2]], {}, [30]],  # other
            ["aten.ones.default", [[1, 2]], {}, [31]],  # grad_out
            ["aten.full.default", [[1, 2], 1 << 40], {"dtype": I64}, [32]],  # arg_out far past nnz
        ],
        [],
        0,
    )
    bwd = "aten._sparse_mm_reduce_impl_backward.default"
    ex.run_batch([[bwd, [ref(h), ref(31), ref(30), "amax", ref(32), [True, True]], {}, [33, 34]]], [], 0)
    assert "arg_out must hold positions within [0, 2]" in s.errors[-1].message and 33 not in ex.tensors
    value, _ = ex.run_call(["aten._sparse_mm_reduce_impl.default", [ref(h), ref(30), "amax"], {}, []], [], 0)
    arg = ex.tensors[value[1]["t"][0]]  # recorded although gpud runs without autograd: the backward needs it
    assert arg.tolist() == [[0, 0]]
    n = len(s.errors)
    ex.run_batch([["aten._sparse_compressed_tensor_with_dims.default", [2, 0, [1, 3], [], I64, I64], {}, [20]]], [], 0)
    assert len(s.errors) == n + 1 and s.errors[-1].code == 800 and 20 not in ex.tensors
    before = ex.allocated
    for handle in (9, 12, h):
        ex.free(handle)
    assert ex.allocated < before and not any(
        isinstance(k, tuple) for k in ex.storages
    )  # a freed sparse tensor's charge is given back


def test_quota_exceeded_is_out_of_memory() -> None:
    ex, s = make(limit=1024)
    ex.run_batch([["aten.ones.default", [[1024]], {}, [1]]], [], 0)  # 4 KiB of float32
    assert s.errors and s.errors[0].code == 2 and 1 not in ex.tensors


def test_sync_call_describes_outputs() -> None:
    ex, _ = make()
    ex.run_batch([["aten.arange.default", [5], {}, [1]]], [], 0)
    value, _ = ex.run_call(["aten.nonzero.default", [ref(1)], {}, []], [], 0)
    h, shape, stride, off, dt = value["t"]
    assert shape == [4, 1] and dt == "int64" and h in ex.tensors
    value, bulk = ex.run_call([W.OP_FETCH, [ref(1)], {}, []], [], 0)
    assert value == ["int64", [5]] and bytes(bulk[0])[:8] == (0).to_bytes(8, "little")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [6, 2])  # 2: grouped-query attention, 3 query heads per key/value head
def test_portable_sdpa_matches_the_cpu_kernel(causal: bool, kv_heads: int) -> None:
    from gpud.aten_portable import sdpa_backward, sdpa_forward

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 5, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, kv_heads, 5, 8, generator=g, dtype=torch.float64) for _ in range(2))
    aten = torch.ops.aten
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
    out2, lse2 = sdpa_forward(q, k, v, 0.0, causal)
    assert torch.allclose(out, out2, atol=1e-10) and torch.allclose(lse.double(), lse2.double(), atol=1e-10)
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    ref = aten._scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, out, lse, 0.0, causal)
    got = sdpa_backward(grad, q, k, v, out, lse, 0.0, causal)
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-10)


def test_failure_does_not_cascade() -> None:
    ex, s = make()
    ex.run_batch(
        [
            ["aten.no_such_op", [], {}, [1]],
            ["aten.neg.default", [ref(1)], {}, [2]],
            ["aten.neg.default", [ref(2)], {}, [3]],
        ],
        [],
        0,
    )
    assert len(s.errors) == 1 and "no_such_op" in s.errors[0].message
    with pytest.raises(CudaError, match="failed"):
        ex.run_call(["aten._local_scalar_dense.default", [ref(3)], {}, []], [], 0)
    ex.run_batch([[W.OP_FREE, [1, 2, 3], {}, []]], [], 0)
    assert not ex.poisoned


def _upload(ex, h: int, t) -> None:
    raw = t.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
    ex.run_batch([[W.OP_UPLOAD, [0, str(t.dtype).removeprefix("torch."), list(t.shape)], {}, [h]]], [raw], 0)


@pytest.mark.parametrize("case", ["ctc_targets", "ctc_lengths", "pool_indices", "unpool_indices", "segment_lengths"])
def test_kernels_that_trust_their_arguments_are_guarded(case: str) -> None:
    """gpud/aten_guards.py: arguments the ATen fuzzer crashed gpud with (out-of-range reads and writes)."""
    ex, s = make()
    g = torch.Generator().manual_seed(0)
    if case.startswith("ctc"):
        _upload(ex, 1, torch.randn(50, 2, 20, generator=g).log_softmax(2))
        _upload(ex, 2, torch.full((2, 30), 1 << 40) if case == "ctc_targets" else torch.ones(2, 30, dtype=torch.long))
        lengths = [50, 50] if case == "ctc_targets" else [-7, 50]
        op = ["aten._ctc_loss.default", [ref(1), ref(2), lengths, [10, 10]], {}, [9, 10]]
    elif case == "pool_indices":
        _upload(ex, 1, torch.randn(1, 1, 4, 4, generator=g))
        _upload(ex, 2, torch.randn(1, 1, 2, 2, generator=g))
        _upload(ex, 3, torch.full((1, 1, 2, 2), 1 << 40))
        op = [
            "aten.max_pool2d_with_indices_backward.default",
            [ref(2), ref(1), [2, 2], [2, 2], [0, 0], [1, 1], False, ref(3)],
            {},
            [9],
        ]
    elif case == "unpool_indices":
        _upload(ex, 1, torch.randn(1, 1, 2, 2, generator=g))
        _upload(ex, 3, torch.full((1, 1, 2, 2), 1 << 40))
        op = ["aten.max_unpool2d.default", [ref(1), ref(3), [4, 4]], {}, [9]]
    else:
        _upload(ex, 1, torch.arange(4.0))
        _upload(ex, 2, torch.tensor([-1, 5]))
        op = ["aten.segment_reduce.default", [ref(1), "sum"], {"lengths": ref(2)}, [9]]
    ex.run_batch([op], [], 0)
    assert len(s.errors) == 1 and "gpud checks what this kernel does not" in s.errors[0].message, s.errors
    assert 9 not in ex.tensors


def test_storage_less_zeros_are_kept_as_real_tensors() -> None:
    """Autograd's ZeroTensors (``_efficientzerotensor``: sgn's and other ops' gradients) have no storage; the
    executor keeps a real one, so the client can read the gradient."""
    ex, s = make()
    ex.run_batch([["aten._efficientzerotensor.default", [[2, 3]], {}, [1]]], [], 0)
    assert not s.errors and not ex.tensors[1]._is_zerotensor()
    (dtype, shape), bulk = ex.run_call([W.OP_FETCH, [ref(1)], {}, []], [], 0)
    assert (dtype, shape, bytes(bulk[0])) == ("float32", [2, 3], bytes(24)) and s.used == 24


def test_torchvision_roi_guards() -> None:
    """NOTE [extension operators] (gpud/aten_exec.py): torchvision's ROI kernels read plane ``rois[k, 0]`` and their
    backward ops write through ``argmax`` unchecked; gpud's guards refuse what would reach past the tensors."""
    from gpud.aten_guards import GUARDS

    x = torch.zeros(2, 3, 8, 8)
    fwd = GUARDS["torchvision::roi_align"]
    fwd("tv.roi_align", {"input": x, "rois": torch.tensor([[1.0, 0, 0, 4, 4], [0.0, 1, 1, 2, 2]])})  # in range
    for bad in ([[2.0, 0, 0, 4, 4]], [[-1.0, 0, 0, 4, 4]], [[float("nan"), 0, 0, 1, 1]]):
        with pytest.raises(CudaError, match=r"tv.roi_align: the batch indices in rois\[:, 0\] must lie in \[0, 2\)"):
            fwd("tv.roi_align", {"input": x, "rois": torch.tensor(bad)})
    with pytest.raises(CudaError, match="rois must be a"):
        fwd("tv.roi_align", {"input": x, "rois": torch.zeros(3, 4)})
    back = GUARDS["torchvision::_roi_pool_backward"]
    named = {
        "grad": torch.zeros(1, 3, 2, 2),
        "rois": torch.tensor([[0.0, 0, 0, 4, 4]]),
        "argmax": torch.zeros(1, 3, 2, 2, dtype=torch.int32),
        "batch_size": 2,
        "channels": 3,
        "height": 8,
        "width": 8,
    }
    back("tv.bwd", named)
    with pytest.raises(CudaError, match=r"argmax must lie in \[-1, 64\)"):
        back("tv.bwd", {**named, "argmax": torch.full((1, 3, 2, 2), 64, dtype=torch.int32)})
    with pytest.raises(CudaError, match="argmax must have the shape of grad"):
        back("tv.bwd", {**named, "argmax": torch.zeros(1, 3, 1, 1, dtype=torch.int32)})
    with pytest.raises(CudaError, match="batch indices"):
        back("tv.bwd", {**named, "batch_size": 0})


def test_an_extension_operator_gpud_lacks_is_named() -> None:
    from gpud.aten_exec import resolve

    try:
        import torchvision  # noqa: F401
    except ImportError:
        with pytest.raises(CudaError, match=r"torchvision::nms: gpud's Python has no torchvision \(install"):
            resolve("torchvision.nms.default")
    else:
        with pytest.raises(CudaError, match=r"gpud's torchvision has no operator torchvision::no_such_op.default"):
            resolve("torchvision.no_such_op.default")
    with pytest.raises(CudaError, match="not an ATen operator name"):
        resolve("os.system.default")


@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_to_float_softmax_runs_on_a_cpu_gpud(op: str, dtype: str) -> None:
    """``softmax(x_half, dtype=float32)`` under autocast is CUDA's ``_softmax(x, dim, half_to_float=True)`` (and its
    backward with a float32 gradient for a half input), which CPU kernels refuse: the executor runs the float32
    kernel on the widened input, and narrows the gradient to the input's type."""
    ex, s = make()
    half = msgpack.ExtType(W.EXT_DTYPE, dtype.encode())
    ex.run_batch(
        [
            ["aten.ones.default", [[3, 5]], {"dtype": half}, [1]],
            ["aten.mul.Scalar", [ref(1), 0.5], {}, [2]],
            [f"aten.{op}.default", [ref(2), 1, True], {}, [3]],
            ["aten.ones_like.default", [ref(3)], {}, [4]],
            [f"aten.{op}_backward_data.default", [ref(4), ref(3), 1, half], {}, [5]],
        ],
        [],
        0,
    )
    assert not s.errors, s.errors
    out, grad = ex.tensors[3], ex.tensors[5]
    assert out.dtype == torch.float32 and grad.dtype == getattr(torch, dtype)
    fn = getattr(torch.ops.aten, op).default
    want = fn(torch.full((3, 5), 0.5), 1, False)
    assert torch.equal(out, want)
    back = getattr(torch.ops.aten, f"{op}_backward_data").default
    assert torch.equal(grad, back(torch.ones(3, 5), want, 1, torch.float32).to(getattr(torch, dtype)))


# NOTE [shared tensors] (gpud/aten_share.py): one tenant's sessions share a storage, charged once
SCOPE = {"scope": ["t", 0]}


def _share(ex: Executor, h: int, scope: dict[str, object] = SCOPE) -> str:
    token, _ = ex.run_call([W.OP_SHARE_EXPORT, [ref(h)], scope, []], [], 0)
    return str(token)


def _receive(ex: Executor, token: str, scope: dict[str, object] = SCOPE) -> int:
    desc, _ = ex.run_call([W.OP_SHARE_IMPORT, [token], scope, []], [], 0)
    return int(desc["t"][0])


def test_a_shared_storage_is_charged_once_and_its_charge_moves_to_a_holder() -> None:
    f32 = msgpack.ExtType(W.EXT_DTYPE, b"float32")
    a, sa = make()
    b, sb = make()
    a.run_batch([["aten.zeros.default", [[256]], {"dtype": f32}, [1]]], [], 0)
    token = _share(a, 1)
    a.run_batch([[W.OP_FREE, [1], {}, []]], [], 0)
    assert sa.used == 1024  # the pending token keeps it the sender's
    h = _receive(b, token)
    assert sb.used == 0  # the receiver rides free
    b.run_batch([["aten.add_.Scalar", [ref(h), 3.0], {}, []]], [], 0)
    a.run_call([W.OP_SYNC, [], {}, []], [], 0)  # the sender's next request lets go of the pin
    assert sa.used == 0
    b.run_call([W.OP_SYNC, [], {}, []], [], 0)  # and the receiver pays from its next request
    assert sb.used == 1024 and b.allocated == 1024
    assert float(b.get(h).sum()) == 3.0 * 256
    with pytest.raises(CudaError) as err:
        _receive(b, token)  # once only
    assert err.value.code == 400
    b.run_batch([[W.OP_FREE, [h], {}, []]], [], 0)
    assert sb.used == 0 and not b.storages


def test_sharing_is_scoped_and_dies_with_the_sender() -> None:
    f32 = msgpack.ExtType(W.EXT_DTYPE, b"float32")
    a, sa = make()
    b, sb = make()
    a.run_batch([["aten.ones.default", [[8]], {"dtype": f32}, [1]]], [], 0)
    with pytest.raises(CudaError) as err:
        a.run_call([W.OP_SHARE_EXPORT, [ref(1)], {}, []], [], 0)  # no scope: not from gpud's broker
    assert err.value.code == 800
    token = _share(a, 1)
    with pytest.raises(CudaError) as err:
        _receive(b, token, {"scope": ["other", 0]})
    assert err.value.code == 400
    with pytest.raises(CudaError) as err:
        _receive(b, token, {"scope": ["t", 1]})
    assert err.value.code == 101 and "gpud device 0" in err.value.message
    h = _receive(b, token)
    token2 = _share(a, 1)
    a.close()  # the sender ends: its pending token dies, its storage stays the receiver's
    assert sa.used == 0
    with pytest.raises(CudaError):
        _receive(b, token2)
    b.run_call([W.OP_SYNC, [], {}, []], [], 0)
    assert sb.used == 32 and float(b.get(h).sum()) == 8.0
    b.close()
    assert sb.used == 0
    from gpud import aten_share

    assert not aten_share._storages and not aten_share._tokens and not aten_share._posted


def test_a_storage_resized_in_place_is_charged_its_new_size_and_its_views_see_it() -> None:
    """NOTE [storage resize]: FSDP frees a parameter's unsharded storage and grows it back; its views follow."""
    f32 = msgpack.ExtType(W.EXT_DTYPE, b"float32")
    ex, s = make(limit=4096)
    ex.run_batch(
        [
            ["aten.ones.default", [[256]], {"dtype": f32}, [1]],
            ["aten.as_strided.default", [ref(1), [16, 16], [16, 1], 0], {}, [2]],
        ],
        [],
        0,
    )
    assert s.used == 1024
    ex.run_call([W.OP_RESIZE_STORAGE, [ref(1), 0], {}, []], [], 0)
    assert s.used == 0 and ex.get(2).untyped_storage().nbytes() == 0
    ex.run_call([W.OP_RESIZE_STORAGE, [ref(1), 1024], {}, []], [], 0)
    ex.run_batch([["aten.fill_.Scalar", [ref(1), 3.0], {}, []]], [], 0)
    assert s.used == 1024 and float(ex.get(2).sum()) == 3.0 * 256  # the view sees the regrown memory
    for bad in (-1, 1 << 60, "x"):
        with pytest.raises(CudaError) as err:
            ex.run_call([W.OP_RESIZE_STORAGE, [ref(1), bad], {}, []], [], 0)
        assert err.value.code == 1
    with pytest.raises(CudaError) as err:
        ex.run_call([W.OP_RESIZE_STORAGE, [ref(1), 8192], {}, []], [], 0)  # past the quota
    assert err.value.code == 2 and s.used == 1024 and ex.get(1).untyped_storage().nbytes() == 1024
    ex.run_batch([[W.OP_FREE, [1, 2], {}, []]], [], 0)
    assert s.used == 0 and not ex.storages


def test_memory_an_op_gives_a_tensor_in_place_is_charged_and_past_the_quota_undone() -> None:
    """NOTE [storages an op regrows]: resize_, set_ and out= change what a handle holds after it was stored."""
    f32 = msgpack.ExtType(W.EXT_DTYPE, b"float32")
    ex, s = make(limit=8192)
    ex.run_batch(
        [
            ["aten.empty.memory_format", [[0]], {"dtype": f32}, [1]],
            ["aten.resize_.default", [ref(1), [1024]], {}, [0]],  # 4 KiB
            ["aten.ones.default", [[256]], {"dtype": f32}, [2]],  # 1 KiB
            ["aten.empty.memory_format", [[0]], {"dtype": f32}, [3]],
            ["aten.set_.source_Tensor", [ref(3), ref(2)], {}, [0]],
            [W.OP_FREE, [2], {}, []],  # 3 holds its storage now
            ["aten.empty.memory_format", [[0]], {"dtype": f32}, [4]],
            ["aten.add.out", [ref(3), ref(3)], {"out": ref(4)}, [0]],  # out= grows 4 to 1 KiB
        ],
        [],
        0,
    )
    assert not s.errors and s.used == 4096 + 1024 + 1024
    assert float(ex.get(3).sum()) == 256.0 and float(ex.get(4).sum()) == 512.0
    ex.run_batch([["aten.resize_.default", [ref(4), [1 << 20]], {}, [0]]], [], 0)  # 4 MiB: past the quota
    assert s.errors and s.errors[-1].code == 2 and "growing a tensor's storage" in s.errors[-1].message
    assert tuple(ex.get(4).shape) == (256,) and float(ex.get(4).sum()) == 512.0  # as it was
    ex.run_batch([["aten.resize_.default", [ref(4), [1 << 58]], {}, [0]]], [], 0)  # the allocator itself refuses
    assert tuple(ex.get(4).shape) == (256,) and float(ex.get(4).sum()) == 512.0
    assert s.errors[-1].code == 2 and "out of memory" in s.errors[-1].message  # as CUDA's allocator reports it
    ex.run_batch([["aten.resize_.default", [ref(1), [16]], {}, [0]]], [], 0)  # a shrunk tensor keeps its storage
    assert s.used == 4096 + 1024 + 1024
    ex.run_batch([[W.OP_FREE, [1, 3, 4], {}, []]], [], 0)
    assert s.used == 0 and not ex.storages
