"""Compressed sparse tensors (CSR, CSC, BSR) on cuda, as graph and pruning code uses them: a GCN whose
normalised adjacency is CSR (``to_sparse_csr()`` on the host, moved with ``.to(device)``), ``torch.sparse.mm``
with an ``amax`` reduction and its gradients, conversions between layouts both ways, and the parts of a tensor.
Run with ``cpu`` or ``cuda``; prints one line per result, which must be equal on both (lines starting with
``own`` are where gpud is stricter than a host: it checks the parts of a tensor built from them)."""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn.functional as F

warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"
torch.manual_seed(0)
V, FEAT, HID, CLS = 50, 16, 8, 3

g = torch.Generator().manual_seed(1)
features = torch.rand(V, FEAT, generator=g)
edges = torch.randint(0, V, (2, 160), generator=g)
adj = torch.sparse_coo_tensor(edges, torch.ones(160), (V, V)).to_dense().clamp(max=1) + torch.eye(V)
d = adj.sum(1).rsqrt()
adj = (d[:, None] * adj * d[None, :]).to_sparse_csr()
labels = torch.randint(0, CLS, (V,), generator=g)

x, a, y = features.to(DEV), adj.to(DEV), labels.to(DEV)
print("layout", a.layout, a.shape, a._nnz() == adj._nnz(), a.sparse_dim(), a.dense_dim())


class GCN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(FEAT, HID), torch.nn.Linear(HID, CLS)

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        h = F.relu(adj @ self.l1(h))
        return F.log_softmax(adj @ self.l2(h), dim=1)


model = GCN().to(DEV)
opt = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(4):
    opt.zero_grad()
    loss = F.nll_loss(model(x, a)[:30], y[:30])
    loss.backward()
    opt.step()
    print("loss", step, f"{loss.item():.6f}")

# the parts, conversions, and the way back
print("crow", a.crow_indices().cpu().tolist()[:8], a.col_indices().cpu().tolist()[:8])
print("values", f"{a.values().sum().item():.6f}")
print("dense", torch.equal(a.to_dense().cpu(), adj.to_dense()))
csc = a.to_sparse_csc()
print("csc", csc.layout, csc.ccol_indices().cpu().tolist()[:8], torch.equal(csc.to_dense().cpu(), adj.to_dense()))
bsr = torch.arange(16.0).reshape(4, 4).to(DEV).to_sparse_bsr((2, 2))
print("bsr", bsr.layout, bsr.values().shape, bsr.to_dense().cpu().sum().item())
back = a.cpu()
print("to_host", back.layout, back.device, torch.equal(back.to_dense(), adj.to_dense()))
coo = a.to_sparse_coo() if hasattr(a, "to_sparse_coo") else a.to_sparse()
print("coo", coo.layout, coo._nnz() == adj._nnz())
print("addmm", f"{torch.addmm(torch.ones(V, 2, device=DEV), a, torch.ones(V, 2, device=DEV)).sum().item():.5f}")
print("repr", "crow_indices=tensor(" in repr(a) and "layout=torch.sparse_csr" in repr(a))

# torch.sparse.mm with a reduction, and its gradients for both operands
w = torch.rand(V, 4, generator=g)
for reduce in ("sum", "amax", "mean"):
    s = adj.detach().to(DEV).requires_grad_(True)
    ww = w.to(DEV).clone().requires_grad_(True)
    out = torch.sparse.mm(s, ww, reduce)
    out.sum().backward()
    print(
        "mm_reduce",
        reduce,
        f"{out.sum().item():.5f}",
        f"{s.grad.to_dense().sum().item():.5f}",
        f"{ww.grad.sum().item():.5f}",
    )

# built from parts on the device
made = torch.sparse_csr_tensor(
    torch.tensor([0, 1, 3]), torch.tensor([2, 0, 1]), torch.tensor([5.0, 6.0, 7.0]), (2, 3), device=DEV
)
print("made", made.device.type == DEV, made.to_dense().cpu().tolist())
try:
    bad = torch.sparse_csr_tensor(
        torch.tensor([0, 1, 3]), torch.tensor([2, 0, 9]), torch.tensor([1.0, 1.0, 1.0]), (2, 3), device=DEV
    )
    bad.to_dense().cpu()
    print("own out_of_range accepted")
except (RuntimeError, IndexError) as exc:  # the host fails only when a kernel reads past the end
    print("own out_of_range refused", "col_indices" in str(exc))
crow = made.crow_indices()
crow.fill_(0)  # on gpud a copy: the tensor keeps its rows
print("own indices_private", made.to_dense().cpu().tolist() == [[0.0, 0.0, 5.0], [6.0, 7.0, 0.0]])
