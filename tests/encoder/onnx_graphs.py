"""What an exported ONNX query graph is made of, read back from its file."""

from __future__ import annotations

from pathlib import Path


def integer_matmuls(path: Path) -> int:
    """How many matrix products of the graph at ``path`` run in integers (``MatMulInteger``,
    what ONNX Runtime's dynamic quantization writes): 0 for a float32 graph."""
    import onnx  # the onnx extra, as the graph itself

    return sum(node.op_type == "MatMulInteger" for node in onnx.load(str(path)).graph.node)
