"""The PyTorch-fidelity table of issue 19, one row a line: each works, or fails with an error naming
what is unsupported (never a wrong answer). Prints 'OK name value' or 'ERR name Type: message'."""

from __future__ import annotations

import io
import sys

import torch

DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"  # "cpu": the LSTM row only, as the reference


def row(name, fn):
    try:
        print(f"OK {name} {fn()!r}", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"ERR {name} {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)


def lstm_hidden_from_new_zeros():
    torch.manual_seed(0)
    m = torch.nn.LSTM(4, 5, num_layers=2).to(DEV)
    w = next(m.parameters())
    h = (w.new_zeros(2, 3, 5), w.new_zeros(2, 3, 5))
    out, _ = m(torch.randn(7, 3, 4).to(DEV), h)
    out.sum().backward()
    return round(float(m.weight_ih_l0.grad.double().abs().sum()), 4)


def encoder_train_dropout():
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1).cuda().train()
    y = layer(torch.randn(5, 2, 16).cuda())
    y.sum().backward()
    return tuple(y.shape)


def save_load_module():
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(3, 2).cuda(), buf)
    buf.seek(0)
    w = torch.load(buf, weights_only=False).weight
    return (isinstance(w, torch.nn.Parameter), str(w.device))


def save_load_views():
    # a state dict whose entries share a storage, as torch.save writes them on a GPU (tagged cuda:0)
    t = torch.arange(10.0).cuda()
    buf = io.BytesIO()
    torch.save({"all": t, "part": t[2:5]}, buf)
    buf.seek(0)
    sd = torch.load(buf)
    cpu = torch.load(io.BytesIO(buf.getvalue()), map_location="cpu")
    sd["all"][3] = 100.0  # the slice was saved as a view of the same storage, and loads back as one
    cpu["all"][3] = 100.0
    return (str(sd["part"].device), sd["part"].tolist(), str(cpu["part"].device), cpu["part"].tolist())


def cuda_graph():
    x = torch.zeros(3).cuda()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
    x.fill_(1.0)
    g.replay()
    return y.tolist()


row("lstm", lstm_hidden_from_new_zeros)
if DEV == "cpu":
    sys.exit(0)
row("where_scalars", lambda: torch.where(torch.arange(4.0).cuda() > 1, 1.0, 0.0).tolist())
row("encoder_train_dropout", encoder_train_dropout)
row("save_load_module", save_load_module)
row("save_load_views", save_load_views)
row("sparse_to_cuda", lambda: torch.eye(3).to_sparse().to("cuda"))
row("memory_summary", lambda: "PyTorch CUDA memory summary" in torch.cuda.memory_summary())
row("memory_stats_keys", lambda: len(torch.cuda.memory_stats()) > 100)
row("utilization_after_stats", lambda: (torch.cuda.memory_stats(), torch.cuda.utilization())[1] >= 0)


def _dlpack_round_trip():
    """to_dlpack and from_dlpack of a cuda tensor: the same memory back (a write through one is seen by the other)."""
    t = torch.ones(2).cuda()
    u = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))
    u[0] = 9.0
    return (t.tolist(), str(u.device))


row("dlpack", _dlpack_round_trip)
row("device_1", lambda: torch.ones(1, device="cuda:1"))
row("version_cuda", lambda: torch.version.cuda)
row("total_memory", lambda: torch.cuda.get_device_properties(0).total_memory == torch.cuda.mem_get_info()[1])
row("cuda_graph", cuda_graph)
row("nvtx", lambda: (torch.cuda.nvtx.range_push("a"), torch.cuda.nvtx.range_pop()))


def fraction():
    torch.cuda.set_per_process_memory_fraction(1e-6)
    try:
        torch.empty(1 << 20, device="cuda").sum().item()
        return "not enforced"
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


row("memory_fraction", fraction)
row("peak", lambda: (torch.cuda.reset_peak_memory_stats(), torch.cuda.max_memory_allocated() >= 0)[1])


def record_stream():  # a data prefetcher's pattern: copy on a side stream, hand the tensor to the main one
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        batch = torch.arange(3.0).cuda(non_blocking=True) * 2
    torch.cuda.current_stream().wait_stream(side)
    batch.record_stream(torch.cuda.current_stream())
    return batch.tolist()


row("record_stream", record_stream)


def storage_ptrs():  # a storage's size and address are gpud's: the same for views, resized for all of them
    a = torch.ones(8, device="cuda")
    v, other = a[2:], torch.ones(8, device="cuda")
    same = a.untyped_storage().data_ptr() == v.untyped_storage().data_ptr() != other.untyped_storage().data_ptr()
    offset = v.data_ptr() - a.data_ptr()
    a.untyped_storage().resize_(0)
    return same, offset, v.untyped_storage().nbytes(), len(other.untyped_storage())


row("storage_ptrs", storage_ptrs)


def save_pretrained():  # tied weights are found by their storages' addresses (transformers, safetensors)
    import tempfile

    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16)).cuda().eval()
    with tempfile.TemporaryDirectory() as d:
        m.save_pretrained(d)
        m2 = GPT2LMHeadModel.from_pretrained(d).cuda()
    x = torch.randint(0, 50, (1, 6), device="cuda")
    return torch.equal(m(x).logits.cpu(), m2(x).logits.cpu()), m2.lm_head.weight is m2.transformer.wte.weight


row("save_pretrained", save_pretrained)
