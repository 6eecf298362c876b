"""The faces a program sees: each is activated by ``wooly run`` before the program's code runs.

A face module exposes ``activate()``; faces whose libraries are not installed are skipped.
"""

from __future__ import annotations

import importlib
import sys

from proto import settings as config

FACES = ("shim.native.face", "shim.torch")


def activate_all() -> list[str]:
    active = []
    for name in FACES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        activate = getattr(mod, "activate", None)
        if activate is None:
            continue
        try:
            if activate() is not False:
                active.append(name)
        except Exception as exc:  # noqa: BLE001 - one broken face must not stop the program
            if config.quiet_client().debug:
                raise
            print(f"wooly: face {name} failed to activate: {type(exc).__name__}: {exc}", file=sys.stderr)
    return active
