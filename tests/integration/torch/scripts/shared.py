"""CUDA tensors sent to other processes (NOTE [shared tensors] in gpud/aten_share.py): hogwild-style training,
where spawned workers update the parent's model in place, run one worker after the other so that the result is
deterministic; then a tensor made by a worker and sent back, which outlives the worker. Run on the host (CPU
tensors in shared memory, what PyTorch does without a GPU) and under ``wooly run`` (cuda tensors on gpud): the
printed parameters must be equal to the bit."""

from __future__ import annotations

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def train(rank: int, model: Net, data: torch.Tensor, target: torch.Tensor, q: mp.Queue) -> None:  # type: ignore[type-arg]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    for step in range(4):
        opt.zero_grad()
        loss = F.nll_loss(model(data[step]), target[step])
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.9g}", flush=True)
    made = torch.full((1000,), float(rank + 1), device=DEVICE)  # made here, sent to the parent
    if DEVICE == "cpu":
        made.share_memory_()
    q.put((rank, made, model.fc1.bias.device.type))
    q.get()  # the parent has it (a host tensor's shared memory is handed over while its sender lives)


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    torch.manual_seed(0)
    model = Net().to(DEVICE)
    model.share_memory()
    data = torch.randn(2, 4, 32, 8).to(DEVICE)
    target = torch.randint(0, 3, (2, 4, 32)).to(DEVICE)
    base = torch.cuda.memory_allocated() if DEVICE == "cuda" else 0
    made = []
    for rank in range(2):
        q, back = mp.Queue(), mp.Queue()
        p = mp.Process(target=train, args=(rank, model, data[rank], target[rank], q))
        p.start()
        r, t, where = q.get(timeout=300)
        made.append(t)
        q.put("thanks")
        p.join(120)
        print("worker", r, "exit", p.exitcode, "on", where)
    for name, prm in model.named_parameters():
        print("param", name, prm.double().sum().item().hex(), isinstance(prm, torch.nn.Parameter), prm.requires_grad)
    print("made", [t.sum().item() for t in made], [t.device.type for t in made])
    if DEVICE == "cuda":  # the workers' tensors are the parent's to pay for now that the workers are gone
        print("memory", torch.cuda.memory_allocated() - base)
    made[0].add_(1)
    print("after", made[0][:3].tolist(), model(data[0][0])[0].exp().sum().item() > 0.99)
