"""Client-side errors: the same ``CudaError`` (CUresult code + name + message) gpud replies with."""

from proto.errors import CudaError, error_name, error_string

__all__ = ["CudaError", "error_name", "error_string"]
