"""Code emitters per target: jit/emit/cpu/ (native code for gpud's CPU backend, its binary interface in
jit/emit/abi.py), jit/emit/amdgpu.py (AMDGPU code objects) and jit/emit/to_llvm.py (a module's PTX, lowered, to
LLVM IR for a target); jit/emit/bounds.py holds the state-space checks both targets share.
"""

from __future__ import annotations

# AMDGPU architectures (wavefront size); the code generator is jit/emit/amdgpu.py
ARCHS = {"gfx90a": 64, "gfx942": 64, "gfx1100": 32}
