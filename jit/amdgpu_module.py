"""A PTX module compiled for AMDGPU: an HSA code object plus the metadata a HIP loader needs to launch it."""

from __future__ import annotations

from dataclasses import dataclass, field

from jit.errors import CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_SUPPORTED, JitError
from jit.runtime import ParamInfo


@dataclass
class AmdgpuKernel:
    name: str
    params: list[ParamInfo]
    param_buffer_size: int  # the kernarg segment is this buffer, byte for byte (NOTE [AMDGPU lowering])
    static_shared_bytes: int
    local_bytes_per_thread: int
    max_threads_per_block: int
    descriptor: str = ""  # kernel descriptor symbol in the code object: '<name>.kd'
    arch: str = ""

    def launch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise JitError(
            CUDA_ERROR_NOT_SUPPORTED,
            f"{self.name}: AMDGPU code objects are launched by the AMD backend (hipModuleLaunchKernel)",
        )


@dataclass
class AmdgpuModule:
    code_object: bytes  # ELF, e_machine AMDGPU, loadable with hipModuleLoadData
    arch: str
    wavefront_size: int
    globals: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (offset in 'wooly.data', size)
    data_symbol: str | None = None
    _kernels: dict[str, AmdgpuKernel] = field(default_factory=dict)

    @classmethod
    def from_meta(cls, obj: bytes, meta: dict) -> AmdgpuModule:
        m = cls(
            obj,
            meta["arch"],
            int(meta["wavefront"]),
            {k: tuple(v) for k, v in meta["globals"].items()},
            meta.get("data_symbol"),
        )
        for k in meta["kernels"]:
            m._kernels[k["name"]] = AmdgpuKernel(
                k["name"],
                [ParamInfo(**p) for p in k["params"]],
                k["param_size"],
                k["static_shared"],
                k["local_bytes"],
                k["max_threads"],
                k["name"] + ".kd",
                m.arch,
            )
        return m

    @property
    def kernel_names(self) -> list[str]:
        return list(self._kernels)

    def get_kernel(self, name: str) -> AmdgpuKernel:
        k = self._kernels.get(name)
        if k is None:
            raise JitError(CUDA_ERROR_NOT_FOUND, f"no kernel named '{name}' in module")
        return k
