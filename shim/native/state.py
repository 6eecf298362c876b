"""Process state behind the native face: initialization, contexts, and handle bookkeeping.

All contexts of a device share that device's gpud session (a context on a real GPU is an address
space and a set of streams; here the session is the address space); each device the program uses is a
session of its own (NOTE [devices of a program] in shim/runtime.py), and a call goes to the session of
the current context's device, or of the device whose stream, event, module or memory it names. Contexts exist so
that the cuCtx family answers consistently: a primary context per device with a retain count,
created contexts, and a per-thread stack of current contexts.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from proto import errors as codes
from proto.errors import CudaError
from shim.driver import Driver

PRIMARY_BASE = 0x5C000000  # primary context handle of device d = PRIMARY_BASE + 16 * d


@dataclass
class Context:
    handle: int
    device: int
    primary: bool
    flags: int = 0
    retains: int = 0
    ident: int = 0
    limits: dict[int, int] = field(
        default_factory=lambda: {0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 64, 6: 0}
    )
    cache_config: int = 0


class State:
    def __init__(self) -> None:
        self.initialized = False
        self.lock = threading.RLock()
        self.contexts: dict[int, Context] = {}
        self._ids = itertools.count(0x5D000000, 16)
        self._ctx_ids = itertools.count(1)
        # Per-thread context stacks, keyed by thread id, not threading.local: a thread the program created
        # itself (a native pthread) enters Python through ctypes with a fresh thread state on every call, so
        # thread-local data would not survive from cuCtxPushCurrent to the next call.
        self._stacks: dict[int, list[int]] = {}
        self.stream_flags: dict[int, tuple[int, int]] = {}  # stream -> (flags, priority)
        self.event_flags: dict[int, int] = {}
        self.global_ranges: dict[int, int] = {}  # module globals: device address -> size

    # ------------------------------------------------------------------ driver
    def driver(self) -> Driver:
        """The driver of the current context's device (``cuda:0``'s with no context current): NOTE [devices of a
        program] in shim/runtime.py, each device of the program is a session of its own."""
        if not self.initialized:
            raise CudaError(codes.NOT_INITIALIZED, "cuInit has not been called")
        from shim import runtime

        ctx = self.current()
        return runtime.device_driver(ctx.device) if ctx is not None and ctx.device else runtime.driver()

    def driver_for(self, handle: int | None) -> Driver:
        """The driver that made stream/event/module/function ``handle``; the current one for the special streams
        (NULL, legacy, per-thread) and for handles no driver made (which that driver then refuses by name)."""
        drv = self.driver()
        h = int(handle or 0)
        if h > 2:
            from shim import runtime

            owner = runtime.driver_of_handle(h)
            if owner is not None:
                return owner
        return drv

    def driver_at(self, ptr: int | None) -> Driver:
        """The driver of the device whose memory ``ptr`` is in (with unified addressing a copy or free needs no
        current context of that device); the current one for any other address."""
        drv = self.driver()
        if drv.is_device_pointer(int(ptr or 0)):
            return drv
        from shim import runtime

        return runtime.driver_of_pointer(int(ptr or 0)) or drv

    def init(self) -> None:
        from shim import runtime

        runtime.driver()  # connect now: cuInit is where a missing gpud is reported
        self.initialized = True

    def device_count(self) -> int:
        if not self.initialized:
            raise CudaError(codes.NOT_INITIALIZED, "cuInit has not been called")
        from shim import runtime

        return len(runtime.visible())

    def device_info(self, dev: int) -> dict[str, Any]:
        """Device ``dev``'s description (NOTE [devices of a program]); no session is opened for it."""
        self.check_device(dev)
        from shim import runtime

        return runtime.device_info(int(dev))

    def check_device(self, dev: int) -> int:
        n = self.device_count()
        if not 0 <= int(dev) < n:
            raise CudaError(codes.INVALID_DEVICE, f"device ordinal {dev} out of range (have {n})")
        return int(dev)

    # ------------------------------------------------------------------ contexts
    def primary(self, dev: int) -> Context:
        dev = self.check_device(dev)
        h = PRIMARY_BASE + 16 * dev
        with self.lock:
            ctx = self.contexts.get(h)
            if ctx is None:
                ctx = self.contexts[h] = Context(h, dev, True, ident=next(self._ctx_ids))
            return ctx

    def create(self, dev: int, flags: int) -> Context:
        dev = self.check_device(dev)
        with self.lock:
            ctx = Context(next(self._ids), dev, False, flags=flags, retains=1, ident=next(self._ctx_ids))
            self.contexts[ctx.handle] = ctx
            return ctx

    def context(self, handle: int | None) -> Context:
        ctx = self.contexts.get(int(handle or 0))
        if ctx is None or (ctx.primary and ctx.retains <= 0 and handle not in self._stack()):
            raise CudaError(codes.INVALID_CONTEXT, f"invalid context handle 0x{int(handle or 0):x}")
        return ctx

    def _stack(self) -> list[int]:
        ident = threading.get_ident()
        st = self._stacks.get(ident)
        if st is None:
            st = self._stacks[ident] = []
        return st

    def current(self) -> Context | None:
        st = self._stack()
        while st and st[-1] not in self.contexts:
            st.pop()
        return self.contexts.get(st[-1]) if st else None

    def require_current(self) -> Context:
        ctx = self.current()
        if ctx is None:
            raise CudaError(codes.INVALID_CONTEXT, "no context is current to the calling thread")
        return ctx

    def set_current(self, handle: int | None) -> None:
        st = self._stack()
        if not handle:
            if st:
                st.pop()
            return
        self.context(handle)
        if st:
            st[-1] = int(handle)
        else:
            st.append(int(handle))

    def push(self, handle: int) -> None:
        self.context(handle)
        self._stack().append(int(handle))

    def pop(self) -> int:
        st = self._stack()
        if not st:
            raise CudaError(codes.INVALID_CONTEXT, "cuCtxPopCurrent: no context is current")
        return st.pop()

    def destroy(self, handle: int) -> None:
        ctx = self.context(handle)
        if ctx.primary:
            raise CudaError(codes.INVALID_CONTEXT, "cuCtxDestroy: a primary context is released, not destroyed")
        with self.lock:
            del self.contexts[ctx.handle]
        st = self._stack()
        if ctx.handle in st:
            st.remove(ctx.handle)

    def current_device(self) -> int:
        ctx = self.current()
        return ctx.device if ctx is not None else 0


STATE = State()
