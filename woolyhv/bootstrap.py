"""Runs inside the user's process (``wooly run``): activate the faces, then run the program as __main__."""

from __future__ import annotations

import os
import runpy
import shutil
import sys

# An uncaught exception while the program's gpud is gone (the node died, its host or the network went) is reported
# as one line and exit status 75 (EX_TEMPFAIL: a retry may succeed), not as a traceback through the shim that
# tells the user nothing more; WOOLY_TRACEBACK=1 keeps the traceback.
LOST_EXIT = 75


def _lost_session_line(exc: BaseException) -> str | None:
    from proto.settings import quiet_client

    s = quiet_client()
    if isinstance(exc, (SystemExit, KeyboardInterrupt)) or s.traceback:
        return None
    try:
        from proto.errors import error_name
        from shim.client import lost
    except ImportError:
        return None
    dead = lost()
    if dead is None:
        return None
    tenant = s.tenant
    why = "" if "checkpoint" in dead.message else f" (tenant {tenant!r} has no checkpoint policy to restore it from)"
    return (
        f"wooly: {error_name(dead.code)}: {dead.message}; the session's device state is lost{why}. "
        "WOOLY_TRACEBACK=1 shows where the program was."
    )


def main() -> None:
    try:
        _main()
    except BaseException as exc:
        line = _lost_session_line(exc)
        if line is None:
            raise
        sys.stdout.flush()
        print(line, file=sys.stderr, flush=True)
        raise SystemExit(LOST_EXIT) from None


def _main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m woolyhv.bootstrap script.py [args...] | -m module [args...]", file=sys.stderr)
        raise SystemExit(2)
    from shim import faces

    faces.activate_all()
    args = sys.argv[1:]
    if args[0] == "-m":
        if len(args) < 2:
            print("wooly run -m: module name missing", file=sys.stderr)
            raise SystemExit(2)
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    script = args[0]
    if not os.path.exists(script) and os.sep not in script:
        script = shutil.which(script) or script  # a Python program on PATH: torchrun, accelerate, a console script
    if not os.path.exists(script):
        print(f"wooly run: {args[0]}: no such file", file=sys.stderr)
        raise SystemExit(2)
    args[0] = script
    sys.argv = args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
