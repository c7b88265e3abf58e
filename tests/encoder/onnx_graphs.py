"""What an exported ONNX query graph is made of, read back from its file; a session that shows
whether calls run inside it at once."""

from __future__ import annotations

import threading
from pathlib import Path


def integer_matmuls(path: Path) -> int:
    """How many matrix products of the graph at ``path`` run in integers (``MatMulInteger``,
    what ONNX Runtime's dynamic quantization writes): 0 for a float32 graph."""
    import onnx  # the onnx extra, as the graph itself

    return sum(node.op_type == "MatMulInteger" for node in onnx.load(str(path)).graph.node)


class MeetingSession:
    """An ONNX Runtime session whose ``run`` waits until ``parties`` calls are inside it at
    once: a lock around the encode leaves the first caller waiting alone, and it fails
    (``threading.BrokenBarrierError``) after ``timeout`` seconds."""

    def __init__(self, session: object, parties: int, timeout: float = 30.0) -> None:
        self.session = session
        self.barrier = threading.Barrier(parties, timeout=timeout)
        self.calls = 0

    def run(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        self.barrier.wait()
        return self.session.run(*args, **kwargs)
