"""The wire format: message models (``proto.messages``) and the codec (``proto.codec``). Nothing else."""

from proto.codec import ProtocolError, decode, encode
from proto.constants import PROTOCOL_VERSION
from proto.errors import CudaError

__all__ = ["PROTOCOL_VERSION", "CudaError", "ProtocolError", "decode", "encode"]
