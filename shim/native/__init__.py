"""The native face: a C libcuda.so.1 / libnvidia-ml.so.1 whose entry points are Python (see face.py)."""
