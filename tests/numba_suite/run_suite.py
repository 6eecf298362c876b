"""Run numba-cuda's own test suite, unmodified, under ``wooly run`` against the CPU backend.

    python -m tests.numba_suite.run_suite                       # cudadrv and cudapy
    python -m tests.numba_suite.run_suite cudadrv --timeout 1800
    python -m tests.numba_suite.run_suite --summarise-only      # re-print the last results

Each package runs as ``wooly run -m pytest --pyargs numba.cuda.tests.<package>`` with a small
plugin (_plugin.py) that records one JSON line per test in ``results/<package>.jsonl``. When the
program or gpud dies, the test that was running is recorded as a crash and the run continues
with the remaining tests in a fresh process. Not part of the default pytest run: it takes long.
The summary (pass / fail / skip / error / crash per package) is printed and written to
``results/summary.json``; failure messages are grouped to help keep FAILURES.md current.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PACKAGES = ("cudadrv", "cudapy")


def _records(path: str) -> tuple[dict[str, dict], str | None]:
    """Outcomes by test id, and the id of a test that started but never finished."""
    ends: dict[str, dict] = {}
    started: str | None = None
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec["event"] == "start":
                    started = rec["id"]
                else:
                    ends[rec["id"]] = rec
                    if started == rec["id"]:
                        started = None
    return ends, started


def run_package(package: str, out_dir: str, deadline: float, per_test_timeout: int, extra: list[str]) -> None:
    out = os.path.join(out_dir, f"{package}.jsonl")
    done_file = os.path.join(out_dir, f"{package}.done")
    env = dict(os.environ)
    env.pop("WOOLY_SERVER", None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["WOOLY_SUITE_OUT"] = out
    env["WOOLY_SUITE_DONE"] = done_file
    env["WOOLY_QUIET_UNSUPPORTED"] = "1"
    env.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    for attempt in range(200):
        ends, started = _records(out)
        if started is not None:  # the process died inside this test: blame it, continue after it
            with open(out, "a") as f:
                f.write(json.dumps({"event": "end", "id": started, "outcome": "crash",
                                    "message": "the test process or gpud died during this test"}) + "\n")
            ends[started] = {"outcome": "crash"}
        with open(done_file, "w") as f:
            f.writelines(i + "\n" for i in ends)
        remaining = deadline - time.monotonic()
        if remaining < 30:
            print(f"[{package}] out of time after {len(ends)} tests", file=sys.stderr)
            return
        cmd = [sys.executable, "-m", "woolyhv", "run", "-m", "pytest", "--pyargs", f"numba.cuda.tests.{package}",
               "-p", "tests.numba_suite._plugin", "-p", "no:cacheprovider", "--import-mode=importlib", "-o", "consider_namespace_packages=true", "--continue-on-collection-errors", "-q", "--no-header", "-rN",
               f"--timeout={per_test_timeout}", "-o", "addopts=", "--rootdir", out_dir, "--confcutdir", out_dir, *extra]
        print(f"[{package}] attempt {attempt + 1}: {len(ends)} tests done, {remaining:.0f} s left", file=sys.stderr)
        log = open(os.path.join(out_dir, f"{package}.log"), "a")
        try:
            proc = subprocess.run(cmd, cwd=out_dir, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=remaining)
        except subprocess.TimeoutExpired:
            print(f"[{package}] overall timeout", file=sys.stderr)
            return
        finally:
            log.close()
        after, started = _records(out)
        if proc.returncode in (0, 1, 5) and started is None:  # finished (5: nothing left to collect)
            return
        if len(after) == len(ends) and started is None:
            print(f"[{package}] no progress (exit {proc.returncode}); see {package}.log", file=sys.stderr)
            return


def forget_failures(path: str) -> None:
    """Drop the records of tests that did not pass, so the next run runs them again."""
    if not os.path.exists(path):
        return
    keep = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec["event"] == "end" and rec["outcome"] not in ("failed", "error", "crash"):
                keep.append(line)
    with open(path, "w") as f:
        f.writelines(keep)


def summarise(out_dir: str) -> dict[str, dict[str, int]]:
    summary: dict[str, dict[str, int]] = {}
    for package in PACKAGES:
        ends, _ = _records(os.path.join(out_dir, f"{package}.jsonl"))
        if not ends:
            continue
        counts = collections.Counter(r["outcome"] for r in ends.values())
        summary[package] = dict(sorted(counts.items()), total=len(ends))
        groups = collections.Counter(
            (r["outcome"], (r.get("message") or "").strip().splitlines()[0][:110] if (r.get("message") or "").strip() else "")
            for r in ends.values() if r["outcome"] in ("failed", "error", "crash")
        )
        print(f"\n== numba.cuda.tests.{package}: " + ", ".join(f"{k} {v}" for k, v in summary[package].items()))
        for (outcome, msg), n in groups.most_common(40):
            print(f"  {n:5d} {outcome:7s} {msg}")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("packages", nargs="*", default=list(PACKAGES), help="cudadrv, cudapy")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--timeout", type=float, default=3 * 3600, help="seconds for the whole run")
    ap.add_argument("--per-test-timeout", type=int, default=120)
    ap.add_argument("--fresh", action="store_true", help="forget earlier results")
    ap.add_argument("--summarise-only", action="store_true")
    ap.add_argument("--rerun-failures", action="store_true", help="run again the tests that failed, errored or crashed")
    ap.add_argument("-k", default=None, help="pytest -k expression")
    args = ap.parse_args()
    unknown = set(args.packages) - set(PACKAGES)
    if unknown:
        ap.error(f"unknown package(s) {sorted(unknown)}; choose from {PACKAGES}")
    os.makedirs(args.out, exist_ok=True)
    if not args.summarise_only:
        deadline = time.monotonic() + args.timeout
        for package in args.packages:
            if args.fresh:
                for suffix in (".jsonl", ".done", ".log"):
                    path = os.path.join(args.out, package + suffix)
                    if os.path.exists(path):
                        os.unlink(path)
            if args.rerun_failures:
                forget_failures(os.path.join(args.out, package + ".jsonl"))
            run_package(package, args.out, deadline, args.per_test_timeout, ["-k", args.k] if args.k else [])
    summarise(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
