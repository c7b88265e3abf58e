"""Inference through ``torch.compile``: the same network, about twice as fast on a CPU.

Eager PyTorch runs a BERT layer as a dozen separate kernels and pays Python overhead between
them, which dominates for short inputs such as one search query. Inductor fuses the
element-wise work (GELU, layer norm, residual adds) into generated C++ and removes the Python
overhead between modules. On the 2-core benchmark machine that is ~2x the sentences/s of eager
mode and half the latency of one query, with vectors equal to eager ones within 1e-5
(docs/benchmarks.md).

**The single-query graph serves every version.** Every encoder of a process goes through one
compiled function that takes the transformer as an argument. For a single text (a search
query) the weights are graph inputs, not constants: a fine-tuned version of the same
architecture (a promotion) runs through the graph already built, so a web process switches
versions without compiling. For batches, Inductor's ``freezing`` makes the weights constants
and pre-packs them for the matrix multiplies, which is where most of the batch speed-up comes
from (without it, batches ran no faster than eager mode on the benchmark machine); the price
is one batch compile per version, which encoding workers pay once when a promotion first
encodes with the new version (dynamo guards the frozen graph on the weights' identity, so a
new version never runs with the old one's weights). Weights changed in place are not seen by
a frozen graph: ``train()`` switches compiling off and ``load_state_dict`` drops the graphs.
Inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``, by default under ``/tmp``) holds the
generated code of the unfrozen graph, keyed by the graph and torch version, so a new process
skips code generation for it.

**Shapes.** Compiled with dynamic shapes: one graph serves every batch size >= 2 and every
sequence length, a second one a single text (torch specializes sizes of 1). Warm both before
traffic (``serving.warmup``) and no input length triggers a compile afterwards.

The costs: a C++ compiler at run time (``g++``/``clang++``, as Inductor needs on a CPU), and
the first call of each shape family in a process traces the model (a few seconds with a warm
on-disk cache, 10-30 s without). If compiling fails (no compiler, unsupported platform), a
warning says why and the encoder carries on in eager mode: compiling is a speed-up, never a
new way to fail.
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


# Graphs one process may hold for the shared function below: two shape families (a batch, a
# single text) per architecture and thread setting. torch's default of 8 per function would
# silently send a process with several encoders back to eager mode.
RECOMPILE_LIMIT = 64

_shared_lock = threading.Lock()
_shared: Transformer | None = None


def _run(transformer: nn.Module, **inputs: torch.Tensor) -> Any:
    return transformer(**inputs)


def shared_compiled() -> Transformer:
    """The process's one compiled function: ``(transformer, **inputs) -> transformer(**inputs)``.

    The transformer is an argument, so its parameters are graph inputs and every model of the
    same architecture (a fine-tuned version of the serving one) runs through the same graphs.
    """
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = torch.compile(_run, dynamic=True)
        return _shared


class CompiledTransformer:
    """A transformer's inference path through ``torch.compile``, with an eager fallback.

    Call it like the transformer (``input_ids=..., attention_mask=...``) inside
    ``torch.inference_mode()``. The graphs are built on the first call of each input shape
    family (dynamic shapes: one graph for every batch size >= 2 and sequence length, one for a
    single text) and shared with every other transformer of the same architecture.
    """

    def __init__(self, transformer: nn.Module) -> None:
        import torch._dynamo.config  # ~1 s to import: only when compiling is asked for
        import torch._inductor.config

        self._dynamo_config = torch._dynamo.config
        self._inductor_config = torch._inductor.config
        self.transformer = transformer
        self._compiled: Transformer | None = shared_compiled()
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
        # A single text (a search query) runs with the weights as graph inputs: one graph for
        # every version of the architecture, so a promotion compiles nothing in a web process.
        # A batch freezes them: pre-packed weights are what doubles throughput, and batches
        # are encoded by workers, which compile once per version (see the module docstring).
        frozen = inputs["input_ids"].shape[0] > 1
        try:
            # dynamic_threads: kernels use the caller's torch thread count rather than the one
            # at compile time, so QUERY_THREADS holds whichever call compiled first. Patched
            # around the call, where compiling happens, rather than set for the whole process.
            with (
                self._inductor_config.patch({"freezing": frozen, "cpp.dynamic_threads": True}),
                self._dynamo_config.patch(recompile_limit=RECOMPILE_LIMIT),
            ):
                return compiled(self.transformer, **inputs)
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
