"""Bad input through the driver API gets the CUDA error a real driver returns; nothing else breaks."""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.native.conftest import PROGS, wooly_run

EXPECTED = {
    "init": "CUDA_SUCCESS",
    "device_out_of_range": "CUDA_ERROR_INVALID_DEVICE",
    "alloc_zero": "CUDA_ERROR_INVALID_VALUE",
    "htod_invalid_pointer": "CUDA_ERROR_INVALID_VALUE",
    "htod_past_end": "CUDA_ERROR_INVALID_VALUE",
    "dtoh_invalid_pointer": "CUDA_ERROR_INVALID_VALUE",
    "memset_misaligned": "CUDA_ERROR_INVALID_VALUE",
    "free_invalid": "CUDA_ERROR_INVALID_VALUE",
    "stream_invalid": "CUDA_ERROR_INVALID_HANDLE",
    "event_invalid": "CUDA_ERROR_INVALID_HANDLE",
    "module_garbage": "CUDA_ERROR_INVALID_PTX",
    "module_cubin": "CUDA_ERROR_NO_BINARY_FOR_GPU",
    "function_invalid": "CUDA_ERROR_INVALID_HANDLE",
    "function_missing": "CUDA_ERROR_NOT_FOUND",
    "launch_block_too_large": "CUDA_ERROR_INVALID_VALUE",
    "launch_block_z_too_large": "CUDA_ERROR_INVALID_VALUE",
    "launch_grid_zero": "CUDA_ERROR_INVALID_VALUE",
    "launch_too_much_shared": "CUDA_ERROR_INVALID_VALUE",
    "launch_no_params": "CUDA_ERROR_INVALID_VALUE",
    "launch_extra_wrong_size": "CUDA_ERROR_INVALID_VALUE",
    "launch_invalid_stream": "CUDA_ERROR_INVALID_HANDLE",
    "graph_launch_invalid": "CUDA_ERROR_INVALID_VALUE",
    "graph_kernel_node_block_too_large": "CUDA_ERROR_INVALID_VALUE",
    "graph_node_deps_null": "CUDA_ERROR_INVALID_VALUE",
    "end_capture_not_capturing": "CUDA_ERROR_ILLEGAL_STATE",
    "capture_legacy_stream": "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    "graph_destroy": "CUDA_SUCCESS",
    "graph_destroy_again": "CUDA_ERROR_INVALID_VALUE",
    # after all of that, the context still works
    "launch_extra_ok": "CUDA_SUCCESS",
    "sync_ok": "CUDA_SUCCESS",
    "dtoh_ok": "CUDA_SUCCESS",
    "kernel_result_ok": "yes",
    # a kernel that traps: queued launch succeeds, the next sync reports it, and it stays reported
    "launch_boom": "CUDA_SUCCESS",
    "sync_after_boom": "CUDA_ERROR_LAUNCH_FAILED",
    "sync_again_after_boom": "CUDA_ERROR_LAUNCH_FAILED",
}


@pytest.fixture(scope="module")
def results(wooly_gpud: str) -> dict[str, str]:
    proc = wooly_run([os.path.join(PROGS, "bad_input.py")], server=wooly_gpud)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_input(results: dict[str, str], case: str) -> None:
    assert results[case] == EXPECTED[case]


def test_gpud_survives_bad_input(wooly_gpud: str, results: dict[str, str]) -> None:
    """The daemon that served the bad input still serves a fresh program."""
    proc = wooly_run([os.path.join(PROGS, "cuda_core_prog.py")], server=wooly_gpud)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_error_message_names_the_problem(wooly_gpud: str) -> None:
    """cuGetErrorString of the failure just returned carries the detail (the driver's string first)."""
    proc = wooly_run([os.path.join(PROGS, "error_message.py")], server=wooly_gpud)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "invalid argument" in proc.stdout
    assert "blockDim.x=2048 not in [1, 1024]" in proc.stdout
