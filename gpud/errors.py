"""gpud's error model: everything a handler raises for a client is a ``CudaError`` with a CUresult."""

from proto import errors as codes
from proto.errors import CudaError

__all__ = ["CudaError", "codes", "invalid_value", "invalid_handle", "not_supported"]


def invalid_value(message: str) -> CudaError:
    return CudaError(codes.INVALID_VALUE, message)


def invalid_handle(message: str) -> CudaError:
    return CudaError(codes.INVALID_HANDLE, message)


def not_supported(what: str) -> CudaError:
    return CudaError(codes.NOT_SUPPORTED, f"{what} is not supported by this gpud")
