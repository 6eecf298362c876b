"""Tensor semantics (indexing, setitem, views, .data, sorting, data-dependent shapes); prints one value a line."""

import torch

dev = "cuda" if torch.cuda.is_available() else "cpu"
r = []
x = torch.arange(10.0, device=dev)
x[0] = 5
x[1:3] = torch.tensor([7.0, 8.0])
x[x > 8] = 0
r.append(x.tolist())
idx = torch.tensor([1, 3], device=dev)
r.append(x[idx].tolist())
r.append(x.masked_fill(x == 0, -1).tolist())
r.append(torch.where(x > 4, x, torch.zeros_like(x)).tolist())
r.append(torch.cat([x, x]).shape[0])
r.append(torch.stack([x, x]).sum(0).tolist())
v, i = x.topk(3)
r.append((v.tolist(), i.tolist()))
r.append(x.sort().values.tolist())
r.append(int(x.argmax()))
r.append(torch.gather(x.view(2, 5), 1, torch.tensor([[0], [1]], device=dev)).tolist())
p = torch.nn.Parameter(torch.ones(3, device=dev))
(p * 2).sum().backward()
with torch.no_grad():
    p -= 0.1 * p.grad
r.append(p.tolist())
p.data.copy_(torch.zeros(3))
r.append(p.tolist())
p.data = torch.full((3,), 2.0, device=dev)
r.append(p.tolist())
r.append(x.new_zeros(2).tolist())
r.append(x.clone().float().double().dtype == torch.float64)
r.append(torch.unique(torch.tensor([3, 1, 3], device=dev)).tolist())
r.append(torch.where(x > 6)[0].tolist())
r.append(x.max().item())
r.append(x.std().item())
r.append(torch.einsum("i,i->", x, x).item())
y = torch.randn(2, 3, device=dev).abs() + 1
r.append(bool(torch.isfinite(y).all()))
r.append(torch.allclose(y, y.clone()))
r.append(float(y.norm() > 0))
e = torch.nn.Embedding(5, 2).to(dev)
r.append(list(e(torch.tensor([[1, 2]], device=dev)).shape))
r.append(x.cpu().numpy().tolist()[:2])
r.append(len(x))
# a host buffer reused right after its copy to the device (a batch loop's pattern): the copy has its old values
buf = torch.ones(4)
first = buf.to(dev, copy=True)  # (copy=True: on the CPU reference .to would alias)
buf.mul_(3)
second = buf.to(dev, copy=True)
buf.zero_()
r.append((first + second).tolist())
# Python sequences in an index: a range (pytorch/examples mnist_forward_forward), NumPy arrays, inner tuples.
import numpy as np  # noqa: E402

z = torch.zeros(4, 5, device=dev)
z[range(4), torch.tensor([1, 2, 3, 4], device=dev)] = z.max() + 2
z[np.array([1, 2]), 0] = 5.0
r.append((z.tolist(), z[range(2)].shape[0], z[np.array([0, 3])].sum().item(), z[(0, 1), (1, 2)].tolist()))
for a in r:
    print(a)
