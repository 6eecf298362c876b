"""The client side of woolyhv: the connection to gpud and the faces programs see through it."""

__version__ = "0.1.0"
