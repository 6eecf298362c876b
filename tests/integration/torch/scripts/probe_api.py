"""Exercises the torch.cuda API and tensor semantics; prints one JSON object per check."""

import json

import torch


def out(**kw):
    print(json.dumps(kw), flush=True)


out(
    is_available=torch.cuda.is_available(),
    device_count=torch.cuda.device_count(),
    name=torch.cuda.get_device_name(0),
    capability=list(torch.cuda.get_device_capability()),
    total_memory=torch.cuda.get_device_properties(0).total_memory,
    current=torch.cuda.current_device(),
    bf16=torch.cuda.is_bf16_supported(),
    accel=str(torch.accelerator.current_accelerator()),
    accel_available=torch.accelerator.is_available(),
)

# memory accounting
base = torch.cuda.memory_allocated()
x = torch.empty(1024, 1024, device="cuda")  # 4 MiB
after = torch.cuda.memory_allocated()
v = x.view(-1)  # a view: no new storage
after_view = torch.cuda.memory_allocated()
del x, v
torch.cuda.empty_cache()
after_free = torch.cuda.memory_allocated()
free, total = torch.cuda.mem_get_info()
out(
    mem_delta=after - base,
    view_delta=after_view - after,
    freed=after_free == base,
    peak_ge=torch.cuda.max_memory_allocated() >= after - base,
    mem_info_ok=0 <= free <= total,
)

# views share storage on gpud; in-place ops through views
a = torch.arange(12.0, device="cuda").view(3, 4)
row = a[1]
row.mul_(10)
col = a[:, 2]
col += 1
a.t()[0].zero_()
b = a.clone()
b.unsqueeze_(0)
out(aliasing=a.cpu().tolist(), unsqueeze_shape=list(b.shape))

# device moves, dtypes, factories, default device
t = torch.tensor([1.5, 2.5], device="cuda")
h = torch.ones(2, 3).cuda().half()
torch.set_default_device("cuda")
d = torch.zeros(2)
torch.set_default_device("cpu")
with torch.device("cuda"):
    e = torch.full((2,), 7.0)
out(
    tensor_dev=str(t.device),
    half=str(h.dtype),
    half_dev=str(h.device),
    default_dev=str(d.device),
    ctx_dev=str(e.device),
    ctx_val=e.tolist(),
    item=t.sum().item(),
    to_cpu=str(t.to("cpu").device),
    is_cuda=t.is_cuda,
    bool_index=t[t > 2].tolist(),
    nonzero=torch.nonzero(t > 0).cpu().flatten().tolist(),
)

# numpy refuses like CUDA
try:
    t.numpy()
    np_err = ""
except TypeError as exc:
    np_err = str(exc)
out(numpy_error=np_err)

# RNG: seeded on gpud, reproducible, state round trip
torch.manual_seed(123)
r1 = torch.randn(4, device="cuda").tolist()
torch.manual_seed(123)
state = torch.cuda.get_rng_state()
r2 = torch.randn(4, device="cuda").tolist()
torch.cuda.set_rng_state(state)
r3 = torch.randn(4, device="cuda").tolist()
torch.manual_seed(123)
cpu_r = torch.randn(4).tolist()
out(rng_repro=r1 == r2 == r3, rng_like_cpu=r1 == cpu_r)
# CUDA's state is Philox's (seed, offset), 16 bytes; DTensor moves the offset per shard (NOTE [rng state])
torch.manual_seed(123)
st = torch.cuda.get_rng_state()
shifted = st.clone()
shifted[8:] = (st[8:].view(torch.int64) + 4).view(torch.uint8)
draws = []
for _ in range(2):
    torch.cuda.set_rng_state(shifted)
    draws.append(torch.randn(4, device="cuda").tolist())
out(
    rng_state=[st.numel(), str(st.dtype), int(st[:8].view(torch.int64)), torch.cuda.initial_seed()],
    rng_offset=draws[0] == draws[1] and draws[0] != r1,
)

# events and streams
s = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
with torch.cuda.stream(s):
    start.record()
    y = torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda")
    end.record()
torch.cuda.synchronize()
out(elapsed_ok=start.elapsed_time(end) >= 0.0, printed=repr(torch.ones(2, device="cuda")))

# modules: parameters stay nn.Parameter; grads are remote
m = torch.nn.Linear(4, 2).cuda()
loss = m(torch.randn(3, 4, device="cuda")).sum()
loss.backward()
out(
    param_type=isinstance(m.weight, torch.nn.Parameter),
    grad_dev=str(m.weight.grad.device),
    param_dev=str(next(m.parameters()).device),
    loss_fmt=f"{loss:.3f}" != "",
)

# inference_mode / no_grad
with torch.inference_mode():
    z = m(torch.randn(1, 4, device="cuda"))
with torch.no_grad():
    z2 = m(torch.randn(1, 4, device="cuda"))
out(inference_ok=not z.requires_grad and not z2.requires_grad)

# optimizers with foreach / fused flags
res = {}
for name, kw in [
    ("sgd_foreach", dict(cls=torch.optim.SGD, foreach=True, momentum=0.9)),
    ("adam_foreach", dict(cls=torch.optim.Adam, foreach=True)),
    ("adamw_fused", dict(cls=torch.optim.AdamW, fused=True)),
]:
    cls = kw.pop("cls")
    torch.manual_seed(0)
    mm = torch.nn.Linear(4, 2)
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict(mm.state_dict())
    mm = mm.cuda()
    o1 = cls(mm.parameters(), lr=0.1, **kw)
    o2 = cls(ref.parameters(), lr=0.1, **{k: v for k, v in kw.items() if k not in ("foreach", "fused")})
    xx = torch.randn(5, 4)
    for _ in range(3):
        o1.zero_grad()
        mm(xx.cuda()).pow(2).sum().backward()
        o1.step()
        o2.zero_grad()
        ref(xx).pow(2).sum().backward()
        o2.step()
    res[name] = torch.allclose(mm.weight.cpu(), ref.weight, atol=1e-6)
out(**res)

# autocast really casts; GradScaler steps
lin = torch.nn.Linear(8, 4).cuda()
xa = torch.randn(2, 8, device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    ya = lin(xa)
    la = torch.nn.functional.cross_entropy(ya, torch.tensor([0, 1], device="cuda"))
la.backward()
scaler = torch.amp.GradScaler("cuda")
sopt = torch.optim.SGD(lin.parameters(), lr=0.1)
with torch.autocast("cuda", dtype=torch.float16):
    ls = lin(xa).float().pow(2).mean()
scaler.scale(ls).backward()
scaler.step(sopt)
scaler.update()
out(
    autocast=[str(ya.dtype), str(la.dtype), str(lin.weight.grad.dtype), str((xa @ xa.t()).dtype)],
    scaler_scale=scaler.get_scale(),
)

# compile falls back to eager
cm = torch.compile(m)
out(compile_ok=list(cm(torch.ones(1, 4, device="cuda")).shape) == [1, 2])

# a factory writing into a cuda tensor, with the device named too (torch.arange(n, out=t, device="cuda"))
o = torch.empty(0, device="cuda")
torch.arange(5.0, out=o, device="cuda")
out(out_factory=[o.tolist(), str(o.device)])
