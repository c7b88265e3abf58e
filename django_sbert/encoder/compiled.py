"""Inference through ``torch.compile``: the same network, about twice as fast on a CPU.

Eager PyTorch runs a BERT layer as a dozen separate kernels with Python overhead between them;
Inductor fuses the element-wise work into generated C++: on a CPU about twice the sentences/s
and half the latency of one query, with vectors equal to eager ones within 1e-5. docs/encoder.md
("``compile=True``" and "Cold start") describes the graphs, their shapes and their costs.

Why the code is shaped as it is: the single-query graph takes the weights as inputs, so every
version of an architecture (a promotion) runs through the graph already built; batches freeze
the weights (Inductor's ``freezing`` pre-packs them, which is where the batch speed-up comes
from), so a new version pays one batch compile, and a frozen graph never sees weights changed
in place (``train()`` switches compiling off, ``load_state_dict`` drops the graphs). Given a
``cache_dir``, the single-query graph is built ahead of time instead (``encoder/aot.py``). If
compiling fails, a warning says why and the encoder carries on in eager mode: compiling is a
speed-up, never a new way to fail.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from .aot import QueryGraph, query_graph
from .exceptions import PackageError

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

    def __init__(
        self, transformer: nn.Module, cache_dir: str | os.PathLike[str] | None = None
    ) -> None:
        self.transformer = transformer
        self._lock = threading.Lock()
        self.failure: str | None = None  # why compiling failed, once it has
        # The ahead-of-time single-query graph (aot.py): built or loaded on the first single
        # text; False once it could not be built (then torch.compile serves single texts too).
        self.cache_dir = cache_dir
        self._query: QueryGraph | Literal[False] | None = None if cache_dir else False
        self._compiled: Transformer | None = None
        self._dynamo_config: Any = None
        self._inductor_config: Any = None
        self._torch_compile_ready = False

    def _torch_compile(self) -> Transformer | None:
        """The shared ``torch.compile`` function, imported on first need (~1 s, then Dynamo)."""
        if not self._torch_compile_ready:
            import torch._dynamo.config  # ~1 s to import: only when compiling is asked for
            import torch._inductor.config

            with self._lock:
                if not self._torch_compile_ready:
                    self._dynamo_config = torch._dynamo.config
                    self._inductor_config = torch._inductor.config
                    self._compiled = shared_compiled()
                    self._torch_compile_ready = True
        return self._compiled

    @property
    def active(self) -> bool:
        """Whether calls go through the compiled graph (False after a failed compile)."""
        return self.failure is None

    @property
    def query_package(self) -> Path | None:
        """The ahead-of-time package serving single texts, once loaded (else None)."""
        return self._query.path if self._query else None

    def __call__(self, **inputs: torch.Tensor) -> Any:
        if self.failure is not None:
            return self.transformer(**inputs)
        ids = inputs["input_ids"]
        if self._query is not False and ids.shape[0] == 1 and ids.shape[1] >= 2:
            query = self._query or self._load_query_graph()
            if query:
                states = query(ids, inputs["attention_mask"])  # (1, seq, hidden)
                return QueryOutput(states)
            if self.failure is not None:
                return self.transformer(**inputs)
        compiled = self._torch_compile()
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
            self._fail(exc)
            return self.transformer(**inputs)

    def _fail(self, exc: BaseException) -> None:
        """Run eager from now on, with one warning saying why."""
        with self._lock:
            if self.failure is None:
                self._compiled = None
                self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                message = (
                    "torch.compile failed, so this encoder runs in eager mode (same "
                    f"vectors, about half the speed): {self.failure}"
                )
                logger.warning(message)
                warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _load_query_graph(self) -> QueryGraph | Literal[False]:
        """Load (or build and store) the single-query package; False when it cannot be built."""
        with self._lock:
            if self._query is not None:
                return self._query
        try:
            graph: QueryGraph | Literal[False] = query_graph(self.transformer, self.cache_dir)
        except PackageError as exc:
            # A package built here that does not load: ours, not an outside error (which
            # would fail the caller and make every later query build again).
            self._no_query_graph(exc)
            graph = False
        except Exception as exc:
            outside = external_cause(exc)
            if outside is not None:
                raise outside from exc
            if compiler_failure(exc):
                self._fail(exc)  # no compiler: torch.compile would fail the same way
            else:
                self._no_query_graph(exc)
            graph = False
        with self._lock:
            if self._query is None:
                self._query = graph
            return self._query

    @staticmethod
    def _no_query_graph(exc: BaseException) -> None:
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        message = (
            "The single-query graph could not be compiled ahead of time "
            f"({type(exc).__name__}: {first_line}); torch.compile serves it instead, "
            "in every new process."
        )
        logger.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


class QueryOutput:
    """The ahead-of-time graph's result, shaped like the transformer's: ``last_hidden_state``."""

    __slots__ = ("last_hidden_state",)

    def __init__(self, last_hidden_state: torch.Tensor) -> None:
        self.last_hidden_state = last_hidden_state  # (1, seq, hidden)


def compiler_failure(exc: BaseException) -> bool:
    """Whether ``exc``'s chain says the C++ compiler is missing or failed."""
    from torch._inductor.exc import InvalidCxxCompiler

    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, InvalidCxxCompiler | subprocess.CalledProcessError):
            return True
        link = link.__cause__ or link.__context__
    return False


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
