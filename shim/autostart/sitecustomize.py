"""NOTE [child interpreters]: Python processes that a ``wooly run`` program starts get the PyTorch face too.

A program's own Python children (``subprocess.run([sys.executable, ...])``, ``multiprocessing`` with the spawn
or forkserver start method, ``torch.multiprocessing.spawn``) are new interpreters: the native face reaches them by
itself (their libcuda is the shim's, through LD_LIBRARY_PATH, and it starts its client in the interpreter that
loads it), but the PyTorch face is an import hook that ``wooly run`` installs in the program's own interpreter
only; without it a child's ``torch.cuda.is_available()`` was False. ``wooly run`` puts this folder first on the
program's PYTHONPATH (nothing else does), so every Python child imports this module at start-up (``site``
imports ``sitecustomize`` from the path) and installs the hook: it costs nothing until torch is imported, and a
child opens a session of its own when it first uses cuda (not at import: spawned data-loading workers import torch
and never touch the device), as each process has its own CUDA context on a GPU. A gpud or JIT worker that the
program starts is left alone (its torch is the device's, not a client's). The module then runs the
``sitecustomize`` it shadows, if any (a distribution's, or a virtual environment's).
"""

import os
import sys

# `python -m` these: wooly's own processes (the program's own interpreter, woolyhv.bootstrap, activates its faces)
_DAEMONS = ("gpud", "gpud.zygote", "jit.worker", "woolyhv", "woolyhv.bootstrap")


def _activate() -> None:
    argv = getattr(sys, "orig_argv", [])
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1] in _DAEMONS:
        return
    try:
        import shim.torch

        shim.torch.prewarm = False  # a child (a data-loading worker, say) opens a session only when it uses cuda
        shim.torch.activate()
    except Exception as exc:  # noqa: BLE001 - the child runs on without the face, and says why
        print(
            f"wooly: the PyTorch face is not active in this child process: {type(exc).__name__}: {exc}", file=sys.stderr
        )


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_activate()
_chain()
