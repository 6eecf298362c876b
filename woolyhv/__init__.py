"""woolyhv: a GPU hypervisor built on CUDA API remoting."""

__version__ = "0.1.0"
