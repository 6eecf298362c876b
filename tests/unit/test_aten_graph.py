"""CUDA graphs on gpud's ATen executor (NOTE [aten graphs]): replay semantics, memory, hostile definitions."""

from __future__ import annotations

import msgpack
import pytest

torch = pytest.importorskip("torch")

from proto import aten as W  # noqa: E402
from tests.unit.test_aten_exec import make, ref  # noqa: E402

F32 = msgpack.ExtType(W.EXT_DTYPE, b"float32")


def setup_static_input():
    ex, s = make()
    ex.run_batch([["aten.ones.default", [[4]], {"dtype": F32}, [1]]], [], 0)  # the static input
    return ex, s


def define(ex, gid, ops):
    ex.run_batch([[W.OP_GRAPH_DEFINE, [gid, ops], {}, []]], [], 0)


def test_outputs_exist_after_capture_and_keep_their_storage_across_replays() -> None:
    ex, s = setup_static_input()
    define(
        ex,
        1,
        [
            ["aten.mul.Tensor", [ref(1), 3.0], {}, [2]],  # temporary
            ["aten.add.Tensor", [ref(2), 1.0], {}, [3]],  # static output
            ["aten.view.default", [ref(3), [2, 2]], {}, [4]],  # a view of it
            [W.OP_FREE, [2], {}, []],
        ],
    )
    assert not s.errors
    out = ex.tensors[3]
    assert out.tolist() == [0.0] * 4 and ex.tensors[4].data_ptr() == out.data_ptr()  # bound, zeroed, aliased
    ex.run_batch([["aten.slice.Tensor", [ref(3), 0, 1, 3], {}, [5]]], [], 0)  # the script's own view
    ex.run_batch([[W.OP_GRAPH_REPLAY, [1], {}, []]], [], 0)
    assert ex.tensors[3] is out and out.tolist() == [4.0] * 4 and ex.tensors[5].tolist() == [4.0] * 2
    assert 2 not in ex.tensors  # the temporary lives only during a replay
    ex.run_batch([["aten.fill_.Scalar", [ref(1), 2.0], {}, [0]], [W.OP_GRAPH_REPLAY, [1], {}, []]], [], 0)
    assert ex.tensors[5].tolist() == [7.0] * 2 and ex.tensors[4].tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert not s.errors


def test_freed_static_output_stays_for_its_graph_until_the_graph_is_dropped() -> None:
    ex, s = setup_static_input()
    define(ex, 1, [["aten.mul.Tensor", [ref(1), 2.0], {}, [2]]])
    define(ex, 2, [["aten.add.Tensor", [ref(2), 1.0], {}, [3]]])  # reads graph 1's output
    used = s.used
    ex.run_batch([[W.OP_FREE, [2], {}, []], [W.OP_GRAPH_REPLAY, [1], {}, []], [W.OP_GRAPH_REPLAY, [2], {}, []]], [], 0)
    assert not s.errors and ex.tensors[3].tolist() == [3.0] * 4 and s.used == used
    ex.run_batch([[W.OP_GRAPH_DROP, [1], {}, []]], [], 0)
    assert 2 not in ex.tensors and s.used == used - 16
    ex.run_batch([[W.OP_GRAPH_DROP, [1], {}, []], [W.OP_GRAPH_REPLAY, [2], {}, []]], [], 0)  # dropping twice: harmless
    assert len(s.errors) == 1 and "not live" in s.errors[0].message
    ex.close()
    assert s.used == 0


@pytest.mark.parametrize(
    "ops,needle",
    [
        ([[W.OP_GRAPH_REPLAY, [1], {}, []]], "cannot be part of a CUDA graph"),
        ([[W.OP_UPLOAD, [0, "float32", [1]], {}, [9]]], "cannot be part of a CUDA graph"),
        ([["aten.from_file.default", ["/etc/passwd"], {}, [9]]], "not allowed"),
        ([["aten.add.Tensor", [ref(1), 1.0], {}, [1]]], "already in use"),
        ([["aten.add.Tensor", [ref(1), 1.0], {}, ["x"]]], "invalid output handle"),
        ([["aten.add.Tensor", [ref(1)], {}]], "malformed"),
        ([5], "malformed"),
    ],
)
def test_hostile_definitions_are_errors(ops, needle) -> None:
    ex, s = setup_static_input()
    define(ex, 7, ops)
    assert len(s.errors) == 1 and needle in s.errors[0].message
    ex.run_batch([[W.OP_GRAPH_REPLAY, [7], {}, []]], [], 0)
    assert "not defined" in s.errors[1].message
    ex.run_batch([["aten.add.Tensor", [ref(1), 1.0], {}, [2]]], [], 0)  # the session goes on
    assert len(s.errors) == 2 and ex.tensors[2].tolist() == [2.0] * 4


def test_graph_limits_and_malformed_messages() -> None:
    ex, s = setup_static_input()
    for bad in ([], ["x", []], [1, "ops"], [True, []]):
        ex.run_batch([[W.OP_GRAPH_DEFINE, bad, {}, []]], [], 0)
    assert len(s.errors) == 4 and all("graph_define takes" in e.message for e in s.errors)
    define(ex, 1, [])
    define(ex, 1, [])
    assert "already defined" in s.errors[-1].message
    from gpud import aten_graph

    big = [["aten.add.Tensor", [ref(1), 1.0], {}, [0]]] * (aten_graph.MAX_GRAPH_OPS + 1)
    define(ex, 2, big)
    assert "at most" in s.errors[-1].message and 2 not in ex.graphs.graphs
