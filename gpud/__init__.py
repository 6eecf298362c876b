"""gpud: the daemon that owns a node's accelerators and runs many tenants' CUDA work on them."""

__version__ = "0.1.0"
