"""Inference through ``torch.compile``: the same network, about twice as fast on a CPU.

Eager PyTorch runs a BERT layer as a dozen separate kernels and packs each weight matrix for
the matrix multiply on every call, which dominates for short inputs such as one search query.
Inductor with ``freezing`` treats the (inference-only) weights as constants: it pre-packs them
once, fuses the element-wise work (GELU, layer norm, residual adds) into generated C++ and
removes the Python overhead between modules. On the 2-core benchmark machine that is ~2x the
sentences/s of eager mode and half the latency of one query, with vectors equal to eager ones
within 1e-6 (docs/benchmarks.md).

The costs, which is why it is opt-in (``SentenceEncoder.load(..., compile=True)`` or
``encoder.compile_for_inference()``):

* it needs a C++ compiler at run time (``g++``/``clang++``, as Inductor does on a CPU);
* each process compiles on first use: 10-15 s per input shape family on 2 cores (one graph
  for batches, one for a single text), less once Inductor's on-disk cache holds the graphs;
* weights are frozen into the compiled graph, so it only serves inference: training works on
  a copy (``fit``), ``train()`` switches compiling off, and moving the model to another
  device or loading a state dict drops the compiled graph.

If compiling fails (no compiler, unsupported platform), a warning says why and the encoder
carries on in eager mode: compiling is a speed-up, never a new way to fail.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

logger = logging.getLogger("django_sbert.encoder")

Transformer = Callable[..., Any]


class CompiledTransformer:
    """A transformer's inference path through ``torch.compile``, with an eager fallback.

    Call it like the transformer (``input_ids=..., attention_mask=...``) inside
    ``torch.inference_mode()``. The compiled graph is built on the first call of each input
    shape family (dynamic shapes: one graph for every batch size >= 2 and sequence length,
    one for a single text).
    """

    def __init__(self, transformer: nn.Module) -> None:
        import torch._inductor.config  # ~1 s to import: only when compiling is asked for

        self._inductor_config = torch._inductor.config
        self.transformer = transformer
        self._compiled: Transformer | None = torch.compile(transformer, dynamic=True)
        self._lock = threading.Lock()
        self.failure: str | None = None  # why compiling failed, once it has

    @property
    def active(self) -> bool:
        """Whether calls go through the compiled graph (False after a failed compile)."""
        return self._compiled is not None

    def __call__(self, **inputs: torch.Tensor) -> Any:
        compiled = self._compiled
        if compiled is None:
            return self.transformer(**inputs)
        try:
            # freezing: weights as constants, pre-packed for the matrix multiplies (inference
            # only). dynamic_threads: kernels use the caller's torch thread count rather than
            # the one at compile time, so QUERY_THREADS holds whichever call compiled first.
            # Patched around the call, where compiling happens, rather than set for the whole
            # process (the patch is thread-local); torch.compile(options=...) does not reach
            # the step that freezes parameters.
            with self._inductor_config.patch({"freezing": True, "cpp.dynamic_threads": True}):
                return compiled(**inputs)
        except torch._dynamo.exc.TorchDynamoException as exc:
            outside = external_cause(exc)
            if outside is not None:
                # Not a compile failure: a time limit, an interrupt, an out-of-memory... that
                # torch wrapped while tracing. Raise it as the caller would see it in eager mode.
                raise outside from exc
            # No C++ compiler, an unsupported operation...: fall back to eager for good, so one
            # bad environment costs one warning, not every call.
            with self._lock:
                if self._compiled is not None:
                    self._compiled = None
                    self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                    message = (
                        "torch.compile failed, so this encoder runs in eager mode (same "
                        f"vectors, about half the speed): {self.failure}"
                    )
                    logger.warning(message)
                    warnings.warn(message, RuntimeWarning, stacklevel=2)
            return self.transformer(**inputs)


def external_cause(exc: BaseException) -> BaseException | None:
    """The first exception in ``exc``'s chain that torch and the compiler did not raise.

    Compiling fails with torch's own errors, possibly caused by the compiler's process or
    files (``OSError``, ``subprocess.CalledProcessError``); anything else in the chain, such
    as Celery's ``SoftTimeLimitExceeded`` or ``MemoryError``, came from outside and must reach
    the caller unchanged instead of being taken for a failed compile.
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        module = type(link).__module__
        compiler_side = isinstance(link, OSError | subprocess.CalledProcessError)
        if not (module == "torch" or module.startswith("torch.") or compiler_side):
            return link
        link = link.__cause__ or link.__context__
    return None
