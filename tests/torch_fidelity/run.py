"""PyTorch fidelity: PyTorch's own OpInfo and ModuleInfo databases run on ``"cuda"`` under ``wooly run``.

    python -m tests.torch_fidelity.run                          # every op and module, the default dtypes
    python -m tests.torch_fidelity.run --kind op --sample 60 --seed 1   # a fixed random sample (CI)
    python -m tests.torch_fidelity.run --names add,mul,nn.Linear        # chosen entries

One gpud (CPU backend) is started for the run; the entries are split into shards, each run by
``wooly run -m tests.torch_fidelity.worker`` (see worker.py for what a sample is and how it is
compared). A shard whose process dies records the entry it was running as ``crash`` and the
run goes on with the rest in a fresh process. The summary is one JSON line per kind and dtype:

    {"bench": "torch_fidelity", "kind": "op", "dtype": "float32", "samples": N, "pass": N,
     "mismatch": N, "xfail": N, "error": N, "crash": N, "skip": N, "pass_rate": 0.98}

(``pass_rate`` = pass / (samples - skip); ``xfail``: samples that differ where PyTorch's database
expects its CPU/CUDA comparison to fail, counted against the rate); every non-passing sample is listed in
``results/failures.jsonl`` and grouped by first error line in ``results/failures.txt``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DTYPES = "float32,float16,bfloat16,int64,bool,complex64"


def entries(kind: str) -> list[str]:
    import warnings

    warnings.simplefilter("ignore")
    if kind == "op":
        from torch.testing._internal.common_methods_invocations import op_db

        return [op.name + ("." + op.variant_test_name if op.variant_test_name else "") for op in op_db]
    from torch.testing._internal.common_modules import module_db

    return [mi.name for mi in module_db]


def _read(path: str) -> tuple[list[dict], set[str], str | None]:
    recs: list[dict] = []
    ended: set[str] = set()
    running: str | None = None
    if os.path.exists(path):
        for line in open(path):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("event") == "start":
                running = r["name"]
            elif r.get("event") == "end":
                ended.add(r["name"])
                running = None
            else:
                recs.append(r)
    return recs, ended, running


def run_kind(kind: str, names: list[str], endpoint: str, out: str, args: argparse.Namespace) -> None:
    """Run ``names`` in shards of ``args.shard`` entries; a dead process costs one entry."""
    pending = list(names)
    done: set[str] = set()
    crashed: set[str] = set()
    env = dict(os.environ, WOOLY_SERVER=endpoint, OMP_WAIT_POLICY="PASSIVE")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    names_file = out + ".names"
    while pending:
        shard, pending = pending[: args.shard], pending[args.shard :]
        while shard:
            with open(names_file, "w") as f:
                f.write("\n".join(shard))
            cmd = [
                sys.executable,
                "-m",
                "woolyhv",
                "run",
                "-m",
                "tests.torch_fidelity.worker",
                "--kind",
                kind,
                "--names",
                names_file,
                "--dtypes",
                args.dtypes,
                "--out",
                out,
                "--timeout",
                str(args.timeout),
                "--limit",
                str(args.limit),
            ] + (["--grad"] if not args.no_grad else [])
            try:
                p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=args.shard_timeout)
                rc, tail = p.returncode, (p.stderr or "").strip().splitlines()[-1:]
            except subprocess.TimeoutExpired:
                rc, tail = -9, ["shard timed out"]
            _, ended, running = _read(out)
            done |= ended
            if rc == 0:
                break
            if running is None or running in crashed:
                # died before starting an entry (or twice on one): give up on the shard's rest
                for n in shard:
                    if n not in done:
                        crashed.add(n)
                        _crash(out, kind, n, f"exit {rc}: {tail[0] if tail else ''}")
                break
            crashed.add(running)
            _crash(out, kind, running, f"exit {rc}: {tail[0] if tail else ''}")
            shard = [n for n in shard if n not in done and n not in crashed]


def _crash(out: str, kind: str, name: str, msg: str) -> None:
    with open(out, "a") as f:
        f.write(json.dumps({"kind": kind, "name": name, "dtype": "*", "i": -1, "status": "crash", "msg": msg}) + "\n")
        f.write(json.dumps({"event": "end", "name": name}) + "\n")


def summarise(path: str, results_dir: str) -> list[dict]:
    recs, _, _ = _read(path)
    by: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    fails = []
    for r in recs:
        by[(r["kind"], r["dtype"])][r["status"]] += 1
        if r["status"] in ("mismatch", "error", "crash", "xfail"):
            fails.append(r)
    lines = []
    for (kind, dtype), c in sorted(by.items()):
        n = sum(c.values())
        counted = n - c["skip"]
        lines.append(
            {
                "bench": "torch_fidelity",
                "kind": kind,
                "dtype": dtype,
                "samples": n,
                "pass": c["pass"],
                "mismatch": c["mismatch"],
                "xfail": c["xfail"],
                "error": c["error"],
                "crash": c["crash"],
                "skip": c["skip"],
                "pass_rate": round(c["pass"] / counted, 4) if counted else 0.0,
            }
        )
    with open(os.path.join(results_dir, "failures.jsonl"), "w") as f:
        for r in fails:
            f.write(json.dumps(r) + "\n")
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for r in fails:
        groups[f"{r['status']}: {r['msg'][:160]}"].append(f"{r['kind']}:{r['name']}[{r['dtype']}]")
    with open(os.path.join(results_dir, "failures.txt"), "w") as f:
        for k, v in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            f.write(f"{len(v):5d}  {k}\n       {', '.join(sorted(set(v))[:12])}\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("op", "module", "both"), default="both")
    ap.add_argument("--names", help="comma-separated entry names (default: all)")
    ap.add_argument("--sample", type=int, default=0, help="a random sample of N entries per kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtypes", default=DTYPES)
    ap.add_argument("--no-grad", action="store_true")
    ap.add_argument("--limit", type=int, default=1000, help="samples per entry and dtype")
    ap.add_argument("--shard", type=int, default=40, help="entries per process")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per sample")
    ap.add_argument("--shard-timeout", type=float, default=1800.0)
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    os.makedirs(a.results, exist_ok=True)
    out = os.path.join(a.results, "samples.jsonl")
    if os.path.exists(out):
        os.unlink(out)
    sys.path.insert(0, ROOT)
    from woolyhv.launcher import start_gpud

    endpoint, proc = start_gpud(log_level="error")
    t0 = time.time()
    try:
        for kind in ("op", "module") if a.kind == "both" else (a.kind,):
            names = entries(kind)
            if a.names:
                wanted = set(a.names.split(","))
                names = [n for n in names if n in wanted]
            if a.sample:
                names = sorted(random.Random(a.seed).sample(names, min(a.sample, len(names))))
            run_kind(kind, names, endpoint, out, a)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    lines = summarise(out, a.results)
    for line in lines:
        print(json.dumps(line))
    print(f"# {time.time() - t0:.0f} s; failures in {os.path.relpath(a.results, ROOT)}/failures.txt", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
