"""Protocol constants shared by gpud and the shim (one place, as in the ZeroMQ guide's MDP.py)."""

PROTOCOL_VERSION = 1
# The CUDA version the driver API face corresponds to (13.0: CUDA 13 runtimes require it): cuDriverGetVersion,
# NVML's driver version, and the device runtime's cudaRuntimeGetVersion in kernels (jit/devrt.py).
CUDA_VERSION = 13000
# First frame of every message. A peer speaking another version is refused with a clear error.
VERSION_FRAME = b"WOOLY\x01"

# Heartbeats: a client pings when idle; gpud answers and expires silent remote sessions.
HEARTBEAT_INTERVAL_S = 0.5
# Remote sessions (another host) expire after this much silence.
SESSION_EXPIRY_S = 10.0
# A client waiting on gpud gives up after this much silence (pings are answered while gpud works).
SERVER_SILENCE_S = 4.0

# Limits on what gpud accepts: a message over them is refused before it is decoded.
MAX_BODY_BYTES = 64 << 20
MAX_BULK_FRAMES = 4096
MAX_MESSAGE_BYTES = 8 << 30

# Calls queued on the client are flushed at sync points or when the queue reaches these.
FLUSH_MAX_CALLS = 256
FLUSH_MAX_BYTES = 8 << 20
