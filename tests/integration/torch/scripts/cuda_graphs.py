"""CUDA graphs the way PyTorch's documentation uses them (whole-network capture with torch.cuda.graph,
partial capture with make_graphed_callables), printing one JSON line per case. Arguments: the device and
"graph" or "eager". The references are the same training run eagerly: on the CPU, and, for AdamW with
capturable=True (which the CPU does not offer), on cuda under wooly."""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"
GRAPH = (sys.argv[2] if len(sys.argv) > 2 else "graph") == "graph"


def emit(case: str, **values: object) -> None:
    print(json.dumps({"case": case, **values}), flush=True)


def whole_network(optimizer: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.LayerNorm(48), torch.nn.Linear(48, 8)
    ).to(DEV)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)  # what capture needs
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    static_x, static_y = torch.randn(64, 32).to(DEV), torch.randint(0, 8, (64,)).to(DEV)
    batches = [(torch.randn(64, 32), torch.randint(0, 8, (64,))) for _ in range(5)]

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):  # warm-up (on a side stream, as the docs do)
        step(static_x, static_y)
    losses = []
    if GRAPH:
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = step(static_x, static_y)
        loss_view = static_loss.view(1)  # a view taken once sees every replay
        for x, y in batches:
            static_x.copy_(x.to(DEV))
            static_y.copy_(y.to(DEV))
            g.replay()
            losses.append(static_loss.item())
        emit(f"whole_network_{optimizer}", losses=losses, view_follows=loss_view.item() == losses[-1])
        g.reset()
    else:
        for x, y in batches:
            losses.append(step(x, y).item())
        emit(f"whole_network_{optimizer}", losses=losses, view_follows=True)


def graphed_callables() -> None:
    torch.manual_seed(0)
    m1, m2, m3 = torch.nn.Linear(16, 24).to(DEV), torch.nn.Linear(24, 4).to(DEV), torch.nn.Linear(24, 4).to(DEV)
    opt = torch.optim.SGD([*m1.parameters(), *m2.parameters(), *m3.parameters()], lr=0.1)
    x, h = torch.randn(32, 16).to(DEV), torch.randn(32, 24).to(DEV).requires_grad_(True)
    if GRAPH:
        m1 = torch.cuda.make_graphed_callables(m1, (x,))
        m2 = torch.cuda.make_graphed_callables(m2, (h,))
    losses = []
    for _ in range(5):
        data, target = torch.randn(32, 16).to(DEV), torch.randn(32, 4).to(DEV)
        opt.zero_grad(set_to_none=True)
        t = m1(data)
        t = m2(t) if t.sum().item() > 0 else m3(t)  # control flow between graphed parts runs eagerly
        loss = F.mse_loss(t, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    emit("graphed_callables", losses=losses)


def refused_inside_capture() -> None:
    if not GRAPH:
        emit("refused", item="refused", after="ok")
        return
    a = torch.ones(4, device=DEV)
    g = torch.cuda.CUDAGraph()
    item = "ran"
    try:
        with torch.cuda.graph(g):
            b = a * 2
            b.sum().item()  # waits for a result: a GPU refuses it during capture too
    except RuntimeError as exc:  # as on a GPU: item() is refused, then capture_end reports the capture failed
        first = exc.__context__ or exc
        item = "refused" if "operation not permitted when stream is capturing" in str(first) else str(first)
    after = "ok" if (a + 1).sum().item() == 8.0 and not torch.cuda.is_current_stream_capturing() else "broken"
    emit("refused", item=item, after=after)


if DEV == "cuda":
    whole_network("adamw")
whole_network("sgd")
graphed_callables()
refused_inside_capture()
