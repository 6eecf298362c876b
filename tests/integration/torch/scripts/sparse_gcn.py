"""Sparse COO tensors on cuda, as graph code uses them (the shape of pytorch/examples gcn: a row-normalised
sparse feature matrix and a renormalised sparse adjacency, both built on the host with ``to_sparse()`` and moved
with ``.to(device)``, two graph convolutions ``adj @ (x @ W)`` trained with Adam). Run with ``cpu`` or ``cuda``;
prints one line per result, which must be equal on both."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"
torch.manual_seed(0)
V, FEAT, HID, CLS = 60, 24, 8, 3

# host-side preparation, as a loader does it
g = torch.Generator().manual_seed(1)
features = (torch.rand(V, FEAT, generator=g) < 0.2).float()
features = torch.diag(1 / features.sum(1).clamp(min=1)).to_sparse() @ features
edges = torch.randint(0, V, (2, 200), generator=g)
adj = torch.sparse_coo_tensor(edges, torch.ones(200), (V, V)).coalesce()
adj = torch.eye(V) + adj
deg = torch.diag(torch.sqrt(1 / adj.sum(1))).to_sparse()
adj = deg @ adj @ deg
labels = torch.randint(0, CLS, (V,), generator=g)

x, a, y = features.to_sparse().to(DEV), adj.to_sparse().to(DEV), labels.to(DEV)
print("layout", x.layout, a.layout, x.is_sparse, a.sparse_dim(), a.dense_dim(), a._nnz() == adj.to_sparse()._nnz())


class GraphConv(torch.nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(n_in, n_out))
        torch.nn.init.xavier_uniform_(self.w)

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return torch.spmm(adj, torch.mm(h, self.w))


class GCN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = GraphConv(FEAT, HID), GraphConv(HID, CLS)

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.c2(F.relu(self.c1(h, adj)), adj), dim=1)


model = GCN().to(DEV)
opt = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=5e-4)
for step in range(5):
    opt.zero_grad()
    loss = F.nll_loss(model(x, a)[:40], y[:40])
    loss.backward()
    opt.step()
    print("loss", step, f"{loss.item():.6f}")
with torch.no_grad():
    out = model(x, a)
    print("acc", f"{((out.argmax(1) == y).float().sum() / V).item():.4f}")

# ops on sparse tensors themselves, and the way back to the host
s = torch.sparse_coo_tensor(torch.tensor([[0, 2, 2, 0], [1, 0, 2, 1]]), torch.tensor([1.0, 2.0, 3.0, 4.0]), (3, 3))
sd = s.to(DEV)
print("uncoalesced", sd.is_coalesced(), sd._nnz())
c = sd.coalesce()
print("coalesce", c.is_coalesced(), c._nnz(), c.indices().cpu().tolist(), c.values().cpu().tolist())
print("dense", (sd * 2 + sd).to_dense().cpu().tolist())
print("transpose", c.t().to_dense().cpu().tolist())
print("sum", torch.sparse.sum(c).item(), torch.sparse.sum(c, dim=1).to_dense().cpu().tolist())
back = c.cpu()
print("to_host", back.layout, back.device, back.is_coalesced(), torch.equal(back.to_dense(), s.to_dense()))
print("repr", "indices=tensor(" in repr(c) and "layout=torch.sparse_coo" in repr(c))
made = torch.sparse_coo_tensor(torch.tensor([[1], [2]]), torch.tensor([5.0]), (3, 3), device=DEV)
print("made", made.device.type, made.to_dense().cpu().tolist()[1])
# writing into a copy of the indices does not change the tensor (gpud keeps indices nobody else holds)
idx = c._indices()
idx.fill_(0)
print("indices_private", c.to_dense().cpu().tolist() == s.to_dense().tolist())
# an index out of range is refused, naming the problem, whichever way it is built (the second way trusts its
# indices on the host: run there it would write out of bounds)
builds = [lambda: torch.sparse_coo_tensor(torch.tensor([[0, 3]]), torch.ones(2), (3,)).to(DEV)]
if DEV != "cpu":
    builds.append(
        lambda: torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors(
            1, 0, [3], torch.tensor([[0, 7]]).to(DEV), torch.ones(2).to(DEV)
        )
    )
for build in builds:
    try:
        bad = build()
        print("out_of_range", "accepted", bad.to_dense().cpu().tolist())
    except Exception as exc:  # noqa: BLE001
        print("out_of_range", "refused", "index" in str(exc))
