"""gpud's error model: everything a handler raises for a client is a ``CudaError`` with a CUresult."""

from proto import errors as codes
from proto.errors import CudaError

__all__ = ["CudaError", "codes"]
