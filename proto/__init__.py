"""What both ends agree on: the wire format (``proto.messages``, ``proto.codec``), error codes, CURVE keys, and the
settings of each side (``proto.settings``, NOTE [settings]) with host identity and sizes. A leaf: it imports no other
package of the project."""

from proto.codec import ProtocolError, decode, encode
from proto.constants import PROTOCOL_VERSION
from proto.errors import CudaError

__all__ = ["PROTOCOL_VERSION", "CudaError", "ProtocolError", "decode", "encode"]
