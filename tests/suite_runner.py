"""What the external-suite runners share (tests/numba_suite, tests/cupy_suite): a suite's tests run under
``wooly run -m pytest`` with tests/suite_plugin.py recording one JSON line per test; when the program or
gpud dies, the test that was running is recorded as a crash and the run continues in a fresh process
with the remaining tests; the summary counts outcomes per package and groups failure messages."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def run_package(
    package: str,
    target: list[str],
    out_dir: str,
    deadline: float,
    per_test_timeout: int,
    extra: list[str],
    rootdir: str | None = None,
    env_extra: dict[str, str] | None = None,
) -> None:
    """Run ``wooly run -m pytest TARGET`` until every test of ``package`` has an outcome (restarting after crashes)."""
    out = os.path.join(out_dir, f"{package}.jsonl")
    done_file = os.path.join(out_dir, f"{package}.done")
    env = dict(os.environ)
    env.pop("WOOLY_SERVER", None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["WOOLY_SUITE_OUT"] = out
    env["WOOLY_SUITE_DONE"] = done_file
    env["WOOLY_QUIET_UNSUPPORTED"] = "1"
    env.update(env_extra or {})
    for attempt in range(200):
        ends, started = _records(out)
        if started is not None:  # the process died inside this test: blame it, continue after it
            with open(out, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "event": "end",
                            "id": started,
                            "outcome": "crash",
                            "message": "the test process or gpud died during this test",
                        }
                    )
                    + "\n"
                )
            ends[started] = {"outcome": "crash"}
        with open(done_file, "w") as f:
            f.writelines(i + "\n" for i in ends)
        remaining = deadline - time.monotonic()
        if remaining < 30:
            print(f"[{package}] out of time after {len(ends)} tests", file=sys.stderr)
            return
        cmd = [
            sys.executable,
            "-m",
            "woolyhv",
            "run",
            "-m",
            "pytest",
            *target,
            "-p",
            "tests.suite_plugin",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
            "-o",
            "consider_namespace_packages=true",
            "--continue-on-collection-errors",
            "-q",
            "--no-header",
            "-rN",
            f"--timeout={per_test_timeout}",
            "-o",
            "addopts=",
            "--rootdir",
            rootdir or out_dir,
            "--confcutdir",
            rootdir or out_dir,
            *extra,
        ]
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


def prepare(out_dir: str, package: str, *, fresh: bool, rerun_failures: bool) -> None:
    """Before a package runs: forget everything (``fresh``) or only the tests that did not pass."""
    if fresh:
        for suffix in (".jsonl", ".done", ".log"):
            path = os.path.join(out_dir, package + suffix)
            if os.path.exists(path):
                os.unlink(path)
    if rerun_failures:
        forget_failures(os.path.join(out_dir, package + ".jsonl"))


def summarise(out_dir: str, packages: list[str] | tuple[str, ...], title: str = "{}") -> dict[str, dict[str, int]]:
    """Outcome counts per package (printed with the commonest failure messages) and summary.json."""
    summary: dict[str, dict[str, int]] = {}
    for package in packages:
        ends, _ = _records(os.path.join(out_dir, f"{package}.jsonl"))
        if not ends:
            continue
        counts = collections.Counter(r["outcome"] for r in ends.values())
        summary[package] = dict(sorted(counts.items()), total=len(ends))
        groups = collections.Counter(
            (
                r["outcome"],
                (r.get("message") or "").strip().splitlines()[0][:110] if (r.get("message") or "").strip() else "",
            )
            for r in ends.values()
            if r["outcome"] in ("failed", "error", "crash")
        )
        print(f"\n== {title.format(package)}: " + ", ".join(f"{k} {v}" for k, v in summary[package].items()))
        for (outcome, msg), n in groups.most_common(40):
            print(f"  {n:5d} {outcome:7s} {msg}")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary
