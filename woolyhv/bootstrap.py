"""Runs inside the user's process (``wooly run``): activate the faces, then run the program as __main__."""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
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
    if not os.path.exists(script):
        print(f"wooly run: {script}: no such file", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
