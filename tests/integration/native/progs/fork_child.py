"""A process that used CUDA forks: the child gets CUDA_ERROR_NOT_INITIALIZED (numba: "CUDA initialized before
forking") instead of hanging on its parent's connection, and the parent's session is untouched."""

import multiprocessing as mp
import os

import numpy as np
from numba import cuda


def child(q):
    try:
        cuda.to_device(np.arange(4))
    except Exception as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {e}")
    else:
        q.put(None)


a = cuda.to_device(np.arange(16, dtype=np.int32))
ctx = mp.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
msg = q.get(timeout=60)
p.join(60)
assert msg is not None and "CUDA initialized before forking" in msg, msg

pid = os.fork()  # a child that exits normally (atexit handlers run) must not close the parent's session
if pid == 0:
    try:
        cuda.to_device(np.arange(4))
        os._exit(3)
    except Exception:  # noqa: BLE001
        pass
    raise SystemExit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status

assert (a.copy_to_host() == np.arange(16)).all()  # the parent goes on with its session
b = cuda.to_device(np.ones(8))
assert b.copy_to_host().sum() == 8
print("fork OK")
