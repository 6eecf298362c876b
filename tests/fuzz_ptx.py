"""A PTX mutation fuzzer against a real gpud: the golden corpus (tests/jit_golden/cases/*.ptx: numba, nvcc and NVRTC
output) mutated as a hostile or broken compiler would (lines deleted, swapped, duplicated; types, state spaces,
registers and immediates changed; backward branches inserted; declarations enlarged; the text cut short), then
loaded and launched with small grids and the fuzzer's own buffers as pointer arguments.

Every module must load or fail with a CUDA error, and every launch must finish or fail within its bounds (the
tenant's max_kernel_s, the compiler's limits: NOTE [bounded compiler]); gpud must never die. Each mutant runs in a
session of its own (errors are sticky), so one mutant's failure says nothing about the next.

    python -m tests.fuzz_ptx --seconds 600 --seed 7      # prints one JSON line: modules, launches, outcomes

``tests/integration/test_fuzz_ptx.py`` runs it for a short, seeded time in CI.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import struct
import time
from collections import Counter
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent / "jit_golden" / "cases"
TYPES = ["u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64", "b8", "b16", "b32", "b64", "f16", "f32", "f64", "pred"]
SPACES = ["global", "shared", "local", "const", "param"]
IMMS = [
    "0",
    "-1",
    "64",
    "0x40",
    "2147483647",
    "-2147483648",
    "4294967295",
    "9223372036854775807",
    "1099511627776",
    "0f7F800000",
    "0d7FF8000000000000",
]
KERNEL_S = 2.0  # the fuzz tenant's max_kernel_s
CALL_S = 90.0  # a call that has not answered by then is a hang (compiles are bounded at 60 s of CPU by default)


def corpus() -> list[str]:
    return [p.read_text() for p in sorted(CORPUS.glob("*.ptx"))]


def mutate(text: str, rng: random.Random) -> str:
    """One to four random mutations of a PTX text."""
    lines = text.splitlines()
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        kind = rng.randrange(10)
        if kind == 0:
            del lines[i]
        elif kind == 1:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == 2:
            lines.insert(rng.randrange(len(lines)), lines[i])
        elif kind == 3:
            lines[i] = re.sub(r"\.(" + "|".join(TYPES) + r")\b", lambda m: "." + rng.choice(TYPES), lines[i], count=1)
        elif kind == 4:
            lines[i] = re.sub(r"\.(" + "|".join(SPACES) + r")\b", lambda m: "." + rng.choice(SPACES), lines[i], count=1)
        elif kind == 5:  # another register of the function, whatever its type
            regs = re.findall(r"%[a-z]+\d+", "\n".join(lines))
            if regs:
                lines[i] = re.sub(r"%[a-z]+\d+", rng.choice(regs), lines[i], count=1)
        elif kind == 6:
            lines[i] = re.sub(r"(?<![\w%$.])-?\d+\b", rng.choice(IMMS), lines[i], count=1)
        elif kind == 7:  # a branch back to a label above
            labels = [ln.strip()[:-1] for ln in lines[:i] if re.fullmatch(r"\s*[$\w]+:\s*", ln)]
            if labels:
                lines.insert(i, f"\tbra.uni {rng.choice(labels)};")
        elif kind == 8:  # a bigger declaration
            lines[i] = re.sub(
                r"([<\[])(\d+)([>\]])",
                lambda m: f"{m.group(1)}{int(m.group(2)) * rng.choice([7, 1000, 1 << 20])}{m.group(3)}",
                lines[i],
                count=1,
            )
        else:
            del lines[rng.randrange(len(lines)) :]
    return "\n".join(lines) + "\n"


def entries(text: str) -> list[str]:
    return re.findall(r"\.entry\s+([\w$]+)", text)


def run(endpoint: str, seconds: float, seed: int, alive: Any = None) -> dict[str, Any]:
    """Fuzz gpud at ``endpoint`` for ``seconds``; ``alive()`` says whether gpud's process still runs."""
    from proto.errors import CudaError
    from tests.conftest import connect

    rng = random.Random(seed)
    texts = corpus()
    out: Counter[str] = Counter()
    stats: dict[str, Any] = {"seed": seed, "modules": 0, "launches": 0, "crashes": 0, "hangs": 0}
    slowest = 0.0
    previous = ""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        text = mutate(rng.choice(texts), rng)
        stats["modules"] += 1
        d = connect(endpoint, tenant="fuzz", timeout_s=CALL_S)
        try:
            t = time.monotonic()
            mod = d.conn.call(
                {"kind": "module_load", "module": 1, "frame": 0, "format": "ptx"}, [text.encode()], timeout_s=CALL_S
            )[0]
            d.modules[1] = mod
            for name in entries(text)[:2]:
                fn = d.module_get_function(1, name)
                args = []
                for size, _align, _off in fn.params:
                    if size == 8 and rng.random() < 0.8:
                        p = d.mem_alloc(1 << 16)
                        d.memcpy_htod(p, bytes(rng.getrandbits(8) for _ in range(64)) * 1024)
                        args.append(struct.pack("<Q", p))
                    else:
                        args.append(bytes(rng.choice([0, 1, 7, 255]) for _ in range(size)))
                grid = (rng.choice([1, 2, 4]), 1, 1)
                block = (rng.choice([1, 32, 64]), 1, 1)
                d.launch_kernel(fn, grid, block, fn.pack_params(args), checked=True)
                stats["launches"] += 1
                d.conn.call({"kind": "ctx_synchronize"}, timeout_s=CALL_S)
            out["ok"] += 1
        except CudaError as exc:
            if exc.name == "CUDA_ERROR_DEVICE_UNAVAILABLE" or "did not answer" in exc.message:
                if alive is not None and not alive():
                    stats["crashes"] += 1
                    stats["crash_text"] = text
                    stats["before_crash_text"] = previous
                    break
                stats["hangs"] += 1
                stats.setdefault("hang_texts", []).append(text)
            out[exc.name] += 1
        finally:
            slowest = max(slowest, time.monotonic() - t)
            try:
                d.conn.close()
            except Exception:  # noqa: BLE001 - a dead connection
                pass
        if alive is not None and not alive():
            stats["crashes"] += 1
            stats["crash_text"] = text
            stats["before_crash_text"] = previous
            break
        previous = text
    stats["outcomes"] = dict(out.most_common())
    stats["slowest_module_s"] = round(slowest, 2)
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from tests.conftest import start

    g = start("ipc", extra_args=["--tenant", f"fuzz:max_kernel_s={KERNEL_S}"])
    try:
        stats = run(g.endpoint, args.seconds, args.seed, alive=lambda: g.proc.poll() is None)
    finally:
        g.stop()
    stats.pop("hang_texts", None)
    print(
        json.dumps(
            {
                "bench": "fuzz_ptx",
                "gpud_exit": g.proc.returncode,
                **{k: v for k, v in stats.items() if not k.endswith("crash_text")},
            }
        )
    )
    if stats.get("crash_text"):
        print("---- the module tried when gpud was found dead:\n" + stats["crash_text"])
        print("---- the one before it:\n" + stats.get("before_crash_text", ""))


if __name__ == "__main__":
    main()
