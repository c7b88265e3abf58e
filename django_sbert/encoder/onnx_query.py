"""One search query through ONNX Runtime: float32 vectors, faster than torch's paths for one text.

A query is one short text: its forward pass is a few dozen small matrix multiplies (about 20 x
384 by 384 x 1536) and the kernel launches, shape checks and allocations between them. ONNX
Runtime runs the whole exported graph in C++ with its weights pre-packed for its own GEMM
kernels, which does this better than torch on the CPUs measured (docs/benchmarks.md, "One
query's encode"), in float32, so its vectors equal eager float32 ones within 1e-6::

    graph = OnnxQueryGraph(transformer, threads=1)   # export (a few seconds), then a session
    graph(input_ids, attention_mask)                  # last_hidden_state, (1, seq, hidden)

**Per version.** The weights are part of the exported graph: each loaded version exports its
own (``torch.onnx.export``, the sequence length dynamic) when it first encodes a single text,
which the serving layer's warm-up and its version watcher do before traffic reaches it. An
encoder loaded in bfloat16 for its batches keeps its float32 weights until that export, so
its queries are float32 too.

**Never a new way to fail.** ``onnxruntime`` and the exporter's packages are imported on first
use; an architecture that does not export, or a graph whose output differs from the torch
transformer's on a probe input, raises ``OnnxUnavailable``, and the encoder serves its queries
through torch again with one warning (``SentenceEncoder.query_runtime_failure``).
"""

from __future__ import annotations

import copy
import logging
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from .aot import PROBE_LENGTH, QueryModule, _named_tensors, _slot
from .exceptions import OnnxUnavailable
from .paths import onnxruntime_missing

# Largest difference from the float32 torch transformer accepted on the probe input.
PROBE_TOLERANCE = 1e-4


class OnnxQueryGraph:
    """``transformer``'s single-text forward pass in an ONNX Runtime session.

    Call it like ``QueryModule``: ``(input_ids, attention_mask)`` of one text in, the token
    states out. Sessions are thread-safe: web threads share one.
    """

    def __init__(
        self, transformer: nn.Module, threads: int = 1, source: nn.Module | None = None
    ) -> None:
        missing = onnxruntime_missing()
        if missing:
            raise OnnxUnavailable(missing)
        import onnxruntime

        self.transformer = transformer
        self.threads = max(1, int(threads))
        # ``source``: the same weights before a cast to bfloat16 (load() keeps them until the
        # first export), so the queries are float32 computations on float32 weights.
        exported = source if source is not None else transformer
        model = _export(exported)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Threads that spin after a query take the CPU from PostgreSQL on the same cores
        # (the reason QUERY_THREADS defaults to 1); with one thread there is no pool at all.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: its optimizer's notes are not the user's
        try:
            self._session = onnxruntime.InferenceSession(
                model, options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise OnnxUnavailable(f"the session could not be built: {_first_line(exc)}") from exc
        # Which tensors the graph was exported from: a version swapped in place (new tensors,
        # e.g. load_state_dict with assign or .to(dtype)) is detected on the next call.
        self._slots = [_slot(transformer, name) for name in _named_tensors(transformer)]
        self._exported_from = self._pointers()
        self._probe(exported)

    def _pointers(self) -> list[int]:
        return [getattr(module, name).data_ptr() for module, name in self._slots]

    @property
    def current(self) -> bool:
        """Whether the transformer still holds the tensors this graph was exported from."""
        return self._pointers() == self._exported_from

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        feed = {
            "input_ids": input_ids.numpy().astype(np.int64, copy=False),
            "attention_mask": attention_mask.numpy().astype(np.int64, copy=False),
        }
        (states,) = self._session.run(None, feed)
        return torch.from_numpy(states)

    def _probe(self, exported: nn.Module) -> None:
        """Compare the session's output with the exported transformer's (float32) on a fixed
        input."""
        vocabulary = int(getattr(exported.config, "vocab_size", 100))
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocabulary, (1, PROBE_LENGTH), generator=generator)
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            expected = QueryModule(_float32(exported))(ids, mask).float()
            try:
                got = self(ids, mask)
            except Exception as exc:
                raise OnnxUnavailable(f"running it failed: {_first_line(exc)}") from exc
        if got.shape != expected.shape or not torch.isfinite(got).all():
            raise OnnxUnavailable("its output has the wrong shape or is not finite")
        difference = float((got - expected).abs().max())
        if difference > PROBE_TOLERANCE:
            raise OnnxUnavailable(f"its output differs from the model's by {difference:.2g}")


def _float32(transformer: nn.Module) -> nn.Module:
    """``transformer`` itself when it is float32, else a float32 copy of it."""
    if all(p.dtype == torch.float32 for p in transformer.parameters()):
        return transformer
    return copy.deepcopy(transformer).float()


def _export(transformer: nn.Module) -> bytes:
    """The serialized ONNX graph of ``QueryModule(transformer)`` in float32."""
    module = QueryModule(_float32(transformer)).eval()
    maximum = int(getattr(transformer.config, "max_position_embeddings", 512))
    sample = torch.zeros((1, PROBE_LENGTH), dtype=torch.long)
    sequence = torch.export.Dim("sequence", min=2, max=max(maximum, PROBE_LENGTH))
    # The exporter logs a warning per torchvision operator it cannot register (not ours).
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on transformers' code
            program: Any = torch.onnx.export(
                module,
                (sample, torch.ones_like(sample)),
                dynamo=True,
                verify=False,
                report=False,
                verbose=False,
                input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"],
                dynamic_shapes={"input_ids": {1: sequence}, "attention_mask": {1: sequence}},
            )
        return program.model_proto.SerializeToString()
    except Exception as exc:  # an architecture torch.export or the ONNX translation refuses
        raise OnnxUnavailable(f"the export failed: {_first_line(exc)}") from exc
    finally:
        registration.setLevel(level)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
