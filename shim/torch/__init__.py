"""The PyTorch face: CUDA tensors of an unmodified script live and compute on gpud.

``activate()`` (called by ``wooly run`` before the script runs) installs an import hook, so
nothing happens, and nothing costs, until the script imports torch; right after torch is
imported the patches below are applied (before the script can take references to the patched
functions). See docs/torch.md for the design.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

_patched = False
prewarm = True  # False in a program's child interpreters (NOTE [child interpreters]): a session only on first use


def apply() -> None:
    """Make this process's torch talk to gpud (idempotent)."""
    global _patched
    if _patched:
        return
    _patched = True
    import os

    import torch  # noqa: F401

    from shim.torch import collectives, cuda_api, device, dlpack, factories, misc, storage

    # Hugging Face's hub kernels (transformers >= 5 with the `kernels` package: loaded for CUDA models) are machine
    # code for a GPU in this process, which there is not: the model runs its PyTorch layers, which gpud runs.
    os.environ.setdefault("USE_HUB_KERNELS", "0")

    device.register_fallback()
    factories.patch()
    cuda_api.patch()
    misc.patch()
    dlpack.patch()
    collectives.install()
    storage.patch()
    _prewarm()


def _prewarm() -> None:
    """Open the session now, in the background: gpud loads its torch while the script sets up."""
    import threading

    from proto.settings import ConfigError, client

    try:
        s = client()
    except ConfigError:
        return  # the first CUDA call reports it
    if not s.server or not s.torch_prewarm or not prewarm:
        return

    def warm() -> None:
        try:
            from proto import aten as W
            from shim.torch import stream as S

            st = S.stream()
            st.push([W.OP_SYNC, [], {}, []])
            st.flush()
        except Exception:  # noqa: BLE001 - the script's first real op reports any problem
            pass

    threading.Thread(target=warm, name="wooly-torch-prewarm", daemon=True).start()


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        from shim.torch import device

        device.load()  # before torch creates its CUDA hooks: NOTE [a cuda device in a CPU build]
        self.inner.exec_module(module)
        apply()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            pass
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def activate() -> bool:
    if "torch" in sys.modules:
        apply()
        return True
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return True  # already (NOTE [child interpreters]: site may have installed it before wooly's bootstrap)
    if importlib.util.find_spec("torch") is None:
        return False
    sys.meta_path.insert(0, _Finder())
    return True
