"""What accelerators this node has: NVIDIA through NVML, AMD through amdsmi, and always the CPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Found:
    backend: str  # "nvidia" | "amd" | "cpu"
    index: int
    name: str
    total_mem: int
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "index": self.index,
            "name": self.name,
            "total_mem": self.total_mem,
            "detail": self.detail,
        }


def nvidia() -> tuple[list[Found], str]:
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py not installed (pip install 'woolyhv[nvidia]')"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound and friends
        return [], f"NVML unavailable: {type(exc).__name__}"
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append(Found("nvidia", i, name if isinstance(name, str) else name.decode(), int(mem.total)))
        return out, f"driver {pynvml.nvmlSystemGetDriverVersion()}"
    finally:
        pynvml.nvmlShutdown()


def amd() -> tuple[list[Found], str]:
    # amdsmi raises KeyError('libamd_smi.so') (after printing) at import when ROCm is absent.
    try:
        import amdsmi
    except (ImportError, KeyError, OSError) as exc:
        return [], f"amdsmi unavailable: {type(exc).__name__}"
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # noqa: BLE001
        return [], f"amdsmi init failed: {type(exc).__name__}"
    try:
        out = []
        for i, h in enumerate(amdsmi.amdsmi_get_processor_handles()):
            info = amdsmi.amdsmi_get_gpu_asic_info(h)
            vram = amdsmi.amdsmi_get_gpu_memory_total(h, amdsmi.AmdSmiMemoryType.VRAM)
            out.append(
                Found(
                    "amd",
                    i,
                    str(info.get("market_name", "AMD GPU")),
                    int(vram),
                    str(info.get("target_graphics_version", "")),
                )
            )
        return out, "rocm"
    finally:
        amdsmi.amdsmi_shut_down()


def cpu() -> list[Found]:
    from gpud.backends.cpu import CpuBackend

    info = CpuBackend(warm=False).info()  # describing the device starts no JIT workers
    return [Found("cpu", 0, info.name, info.total_mem, "PTX JIT via LLVM")]


def discover() -> dict[str, Any]:
    nv, nv_note = nvidia()
    am, am_note = amd()
    return {
        "devices": [d.as_dict() for d in nv + am + cpu()],
        "notes": {"nvidia": nv_note, "amd": am_note, "cpu": "always available"},
    }
