"""Run numba-cuda's own test suite, unmodified, under ``wooly run`` against the CPU backend.

    python -m tests.numba_suite.run_suite                       # cudadrv and cudapy
    python -m tests.numba_suite.run_suite cudadrv --timeout 1800
    python -m tests.numba_suite.run_suite --summarise-only      # re-print the last results

Each package runs as ``wooly run -m pytest --pyargs numba.cuda.tests.<package>`` with a small
plugin (tests/suite_plugin.py) that records one JSON line per test in ``results/<package>.jsonl``. When the
program or gpud dies, the test that was running is recorded as a crash and the run continues
with the remaining tests in a fresh process. Not part of the default pytest run: it takes long.
The summary (pass / fail / skip / error / crash per package) is printed and written to
``results/summary.json``; failure messages are grouped to help keep FAILURES.md current.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tests.suite_runner import prepare, run_package, summarise

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = ("cudadrv", "cudapy")


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
            prepare(args.out, package, fresh=args.fresh, rerun_failures=args.rerun_failures)
            run_package(
                package,
                ["--pyargs", f"numba.cuda.tests.{package}"],
                args.out,
                deadline,
                args.per_test_timeout,
                ["-k", args.k] if args.k else [],
                env_extra={"NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0"},
            )
    summarise(args.out, args.packages, "numba.cuda.tests.{}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
