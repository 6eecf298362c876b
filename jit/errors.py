"""Error model of the PTX JIT: CUresult codes and the one exception type it raises."""

from __future__ import annotations

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
CUDA_ERROR_LAUNCH_TIMEOUT = 702
CUDA_ERROR_ASSERT = 710
CUDA_ERROR_LAUNCH_FAILED = 719
CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
CUDA_ERROR_NOT_SUPPORTED = 801

_NAMES = {v: k for k, v in dict(globals()).items() if k.startswith("CUDA_")}


def error_name(code: int) -> str:
    return _NAMES.get(code, f"CUDA_ERROR_{code}")


class JitError(Exception):
    """A CUDA-style error: ``code`` is the CUresult, ``name`` its symbolic name."""

    def __init__(self, code: int, message: str) -> None:
        self.code = int(code)
        self.name = error_name(self.code)
        self.message = message
        super().__init__(f"{self.name}: {message}")

    def __reduce__(self):  # keep picklable for thread pools and tests
        return (JitError, (self.code, self.message))


def invalid_ptx(msg: str, line: int = 0, col: int = 0) -> JitError:
    where = f"{line}:{col}: " if line else ""
    return JitError(CUDA_ERROR_INVALID_PTX, where + msg)


def not_supported(what: str, line: int = 0) -> JitError:
    where = f" (line {line})" if line else ""
    return JitError(CUDA_ERROR_NOT_SUPPORTED, f"{what}{where}")
