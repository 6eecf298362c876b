"""Run CuPy's own tests, unmodified, under ``wooly run`` against the CPU backend.

    python -m tests.cupy_suite.run_suite --tests /path/to/cupy/tests             # the core packages
    python -m tests.cupy_suite.run_suite --tests DIR creation sorting --timeout 1800
    python -m tests.cupy_suite.run_suite --summarise-only

``--tests`` is the ``tests`` folder of a CuPy checkout at the installed version's tag (github:cupy/cupy;
fetch it, nothing here downloads). The packages are those the issue names: creation, math,
manipulation, indexing, sorting, statistics, linalg, fft, random and, from core_tests, the kernel
APIs (RawKernel/RawModule, ElementwiseKernel, ReductionKernel). Each runs as
``wooly run -m pytest <folder or files>`` with tests/suite_plugin.py (one JSON line per test, crash-safe;
tests/suite_runner.py). The pass rate is taken over the tests that do not skip. Not part of the default
pytest run: it takes hours on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tests.suite_runner import _records, prepare, run_package, summarise

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = {
    "creation": ["cupy_tests/creation_tests"],
    "math": ["cupy_tests/math_tests"],
    "manipulation": ["cupy_tests/manipulation_tests"],
    "indexing": ["cupy_tests/indexing_tests"],
    "sorting": ["cupy_tests/sorting_tests"],
    "statistics": ["cupy_tests/statistics_tests"],
    "linalg": ["cupy_tests/linalg_tests"],
    "fft": ["cupy_tests/fft_tests"],
    "random": ["cupy_tests/random_tests"],
    "kernels": [
        "cupy_tests/core_tests/test_raw.py",
        "cupy_tests/core_tests/test_elementwise.py",
        "cupy_tests/core_tests/test_reduction.py",
        "cupy_tests/core_tests/test_userkernel.py",
    ],
}


def pass_rate(out_dir: str, packages: list[str]) -> dict:
    """Passed over the tests that ran (not skipped), per package and in all."""
    rows, total_pass, total_ran = {}, 0, 0
    for package in packages:
        ends, _ = _records(os.path.join(out_dir, f"{package}.jsonl"))
        ran = [r for r in ends.values() if r["outcome"] not in ("skipped", "xfailed")]
        passed = sum(r["outcome"] in ("passed", "xpassed") for r in ran)
        rows[package] = {"ran": len(ran), "passed": passed, "rate": round(passed / len(ran), 4) if ran else None}
        total_pass += passed
        total_ran += len(ran)
    rows["all"] = {
        "ran": total_ran,
        "passed": total_pass,
        "rate": round(total_pass / total_ran, 4) if total_ran else None,
    }
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("packages", nargs="*", default=list(PACKAGES), help=", ".join(PACKAGES))
    ap.add_argument("--tests", default=os.environ.get("WOOLY_CUPY_TESTS"), help="the tests/ folder of a CuPy checkout")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds for the whole run")
    ap.add_argument("--per-test-timeout", type=int, default=300)
    ap.add_argument("--fresh", action="store_true", help="forget earlier results")
    ap.add_argument("--summarise-only", action="store_true")
    ap.add_argument("--rerun-failures", action="store_true")
    ap.add_argument("-k", default=None, help="pytest -k expression")
    args = ap.parse_args()
    unknown = set(args.packages) - set(PACKAGES)
    if unknown:
        ap.error(f"unknown package(s) {sorted(unknown)}; choose from {list(PACKAGES)}")
    os.makedirs(args.out, exist_ok=True)
    # CuPy's own switch for machines with fewer GPUs than a test asks for (its CI sets it): gpud's CPU backend is one
    # device, so @testing.multi_gpu(2) tests skip instead of failing on cudaErrorInvalidDevice
    os.environ.setdefault("CUPY_TEST_GPU_LIMIT", "1")
    if not args.summarise_only:
        if not args.tests or not os.path.isdir(os.path.join(args.tests, "cupy_tests")):
            ap.error("--tests must name the tests/ folder of a CuPy checkout (github:cupy/cupy)")
        tests = os.path.abspath(args.tests)
        deadline = time.monotonic() + args.timeout
        for package in args.packages:
            prepare(args.out, package, fresh=args.fresh, rerun_failures=args.rerun_failures)
            target = [os.path.join(tests, t) for t in PACKAGES[package]]
            run_package(
                package,
                target,
                args.out,
                deadline,
                args.per_test_timeout,
                ["-k", args.k] if args.k else [],
                rootdir=tests,
            )
    summarise(args.out, args.packages, "cupy_tests {}")
    rates = pass_rate(args.out, args.packages)
    print("\npass rate over tests that ran:", json.dumps(rates))
    with open(os.path.join(args.out, "pass_rate.json"), "w") as f:
        json.dump(rates, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
