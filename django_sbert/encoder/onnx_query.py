"""One search query through ONNX Runtime: float32 vectors, faster than torch's float32 paths;
or int8 weights, faster again where the CPU has no native bfloat16.

ONNX Runtime runs the whole exported graph of a short text in C++ with its weights pre-packed
for its own GEMM kernels: 1.5x torch's compiled float32 graph for one query (docs/benchmarks.md,
"One query's encode"), with vectors equal to eager float32 ones within 1e-6::

    graph = OnnxQueryGraph(transformer, threads=1)   # export (a few seconds), then a session
    graph(input_ids, attention_mask)                  # last_hidden_state, (1, seq, hidden)

**int8** (``int8=True``, ``QUERY_RUNTIME="onnxruntime-int8"``): the exported graph's matrix
products get int8 weights, one scale per output channel, and their inputs are quantized per
call (ONNX Runtime's dynamic quantization). A query costs about 0.6x the float32 graph's CPU on
an AVX2 host, and its vector moves from float32's (cosine 0.979 at the lowest over SciFact's
claims): rankings change slightly, documents keep their float32 vectors, and nothing needs
re-embedding. Each text is still encoded alone, so a text's vector never depends on its batch.

**Per version.** The weights are part of the exported graph: each loaded version exports its
own (``torch.onnx.export``, the sequence length dynamic) when it first encodes a single text,
which the serving layer's warm-up and its version watcher do before traffic reaches it. An
encoder loaded in bfloat16 for its batches keeps its float32 weights until that export, so
its queries are float32 too.

**Kept on disk per host.** Given a cache directory (``SBERT["COMPILE_CACHE"]``), the exported
graph is stored under a key of the weights' bytes and the exporter's versions (``graph_path``),
written whole, checked on load, and deleted once unused for ``UNUSED_DAYS`` days.

**Never a new way to fail.** ``onnxruntime`` and the exporter's packages are imported on first
use; an architecture that does not export, or a graph whose output differs from the torch
transformer's on a probe input, raises ``OnnxUnavailable``, and the encoder serves its queries
through torch again with one warning (``SentenceEncoder.query_runtime_failure``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .aot import (
    PROBE_LENGTH,
    QueryModule,
    _entry_lock,
    _named_tensors,
    _slot,
    probe,
    probe_outputs,
    prune_files,
)
from .exceptions import OnnxUnavailable
from .filemodes import shared_mode
from .paths import onnxruntime_missing

logger = logging.getLogger("django_sbert.encoder")

# Largest difference from the float32 torch transformer accepted on the probe input.
PROBE_TOLERANCE = 1e-4
# An int8 graph moves every value a little: it is checked on the probe input's mean-pooled
# vector instead, whose cosine to float32's must be at least this (all-MiniLM-L6-v2: 0.99;
# a graph quantized per tensor rather than per channel drops towards 0.9 on real queries).
INT8_PROBE_COSINE = 0.97
# Bump when the export changes: older entries are then never loaded, and pruned.
GRAPH_FORMAT = 1
# A stored graph no process has loaded for this long is deleted when another one is stored:
# each version has its own file, of the model's float32 size.
UNUSED_DAYS = 7
ABANDONED_BUILD_HOURS = 6
_quantizing = threading.Lock()


class OnnxQueryGraph:
    """``transformer``'s single-text forward pass in an ONNX Runtime session.

    Call it like ``QueryModule``: ``(input_ids, attention_mask)`` of one text in, the token
    states out. Sessions are thread-safe: web threads share one.
    """

    def __init__(
        self,
        transformer: nn.Module,
        threads: int = 1,
        source: nn.Module | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        int8: bool = False,
    ) -> None:
        missing = onnxruntime_missing()
        if missing:
            raise OnnxUnavailable(missing)

        self.transformer = transformer
        self.threads = max(1, int(threads))
        self.int8 = int8
        # ``source``: the same weights before a cast to bfloat16 (load() keeps them until the
        # first export), so the queries are float32 computations on float32 weights.
        exported = source if source is not None else transformer
        self.path: Path | None = None  # the stored graph it was built from, if any
        # Which tensors the graph was exported from: a version swapped in place (new tensors,
        # e.g. load_state_dict with assign or .to(dtype)) is detected on the next call.
        self._slots = [_slot(transformer, name) for name in _named_tensors(transformer)]
        self._exported_from = self._pointers()
        if cache_dir is not None:
            try:
                self._load_or_store(exported, Path(cache_dir))
                return
            except OSError as exc:  # a cache directory this process cannot write or lock
                logger.warning(
                    "Query graph cache %s unusable (%s): exporting here.", cache_dir, exc
                )
        self._session = self._start(self._build(exported))
        self._probe(exported)

    def _build(self, exported: nn.Module) -> bytes:
        """The serialized graph this instance runs: exported, then quantized when int8."""
        model = _export(exported)
        return _quantize(model) if self.int8 else model

    def _load_or_store(self, exported: nn.Module, cache_dir: Path) -> None:
        """Build the session from the stored graph, storing it first if absent or bad."""
        started = time.perf_counter()
        path = graph_path(cache_dir, exported, int8=self.int8)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._load_checked(path, exported):
            self._log_loaded(started)
            return
        with _entry_lock(path):
            if self._load_checked(path, exported):  # another process stored it meanwhile
                self._log_loaded(started, " (exported by another process meanwhile)")
                return
            model = self._build(exported)
            # From the stored file when it could be written: a session built from bytes in
            # memory holds about twice the memory of one that reads a file (measured).
            self._session = self._start(str(path) if _store(path, model) else model)
            del model
            try:
                self._probe(exported)
            except OnnxUnavailable:
                path.unlink(missing_ok=True)  # never left for the next process to load
                raise
        prune(path.parent, keep=path)
        self.path = path
        logger.info(
            "Exported the query graph %s in %.1f s (stored for this host's later processes).",
            path.name,
            time.perf_counter() - started,
        )

    def _log_loaded(self, started: float, note: str = "") -> None:
        # A server's log shows whether a process had its graph before it said it was ready.
        name = self.path.name if self.path else "?"
        logger.info(
            "Loaded the query graph %s in %.1f s%s.", name, time.perf_counter() - started, note
        )

    def _load_checked(self, path: Path, exported: nn.Module) -> bool:
        """Whether the stored graph at ``path`` loaded and passed the probe; a bad one is
        deleted with a warning."""
        if not path.exists():
            return False
        try:
            self._session = self._start(str(path))
            self._probe(exported)
        except OnnxUnavailable as exc:
            message = f"The stored query graph {path} cannot be used ({exc}); it is exported again."
            logger.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=4)
            path.unlink(missing_ok=True)
            return False
        with suppress(OSError):  # a read-only cache still serves; it is just never pruned
            os.utime(path)
        self.path = path
        return True

    def _start(self, model: bytes | str) -> Any:
        """An ONNX Runtime session of ``model`` on ``threads`` threads."""
        import onnxruntime

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
            return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise OnnxUnavailable(f"the session could not be built: {_first_line(exc)}") from exc

    def _pointers(self) -> list[int]:
        return [tensors[name].data_ptr() for tensors, name in self._slots]

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
        input: value by value for float32, by the pooled vector's cosine for int8."""
        if not self.int8:
            difference = probe(self, _float32(exported), OnnxUnavailable)
            if difference > PROBE_TOLERANCE:
                raise OnnxUnavailable(f"its output differs from the model's by {difference:.2g}")
            return
        got, expected = probe_outputs(self, _float32(exported), OnnxUnavailable)
        cosine = float(
            torch.nn.functional.cosine_similarity(got.float().mean(1), expected.float().mean(1))
        )
        if cosine < INT8_PROBE_COSINE:
            raise OnnxUnavailable(
                f"its int8 output is too far from the model's (cosine {cosine:.3f} on the "
                f"probe, at least {INT8_PROBE_COSINE} needed)"
            )


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


def _quantize(model: bytes) -> bytes:
    """``model`` with int8 weights in its matrix products (one scale per output channel) and
    their inputs quantized on each call: ONNX Runtime's dynamic quantization."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    try:
        with _quiet_quantizer(), tempfile.TemporaryDirectory(prefix="sbert-int8-") as folder:
            source, target = Path(folder, "float32.onnx"), Path(folder, "int8.onnx")
            source.write_bytes(model)
            quantize_dynamic(
                source,
                target,
                per_channel=True,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul"],
            )
            return target.read_bytes()
    except Exception as exc:  # an operator the quantizer does not know
        raise OnnxUnavailable(f"int8 quantization failed: {_first_line(exc)}") from exc


def _not_from_onnxruntime(record: logging.LogRecord) -> bool:
    return "onnxruntime" not in record.pathname


@contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Drop the quantizer's advice (``logging.warning`` on the root logger) without touching
    anyone else's logging: a filter on the root logger sees only records logged at the root,
    and a handler while the root has none keeps ``logging.warning`` from installing one
    (``basicConfig``) for good."""
    root = logging.getLogger()
    with _quantizing:  # one at a time: each undoes exactly what it did
        placeholder = logging.NullHandler() if not root.handlers else None
        root.addFilter(_not_from_onnxruntime)
        if placeholder is not None:
            root.addHandler(placeholder)
        try:
            yield
        finally:
            root.removeFilter(_not_from_onnxruntime)
            if placeholder is not None:
                root.removeHandler(placeholder)


def graph_path(cache_dir: str | os.PathLike[str], exported: nn.Module, int8: bool = False) -> Path:
    """Where the graph exported from ``exported`` (float32 weights) is stored in ``cache_dir``:
    keyed by every tensor's name, shape and bytes, the configuration and the exporter, and
    whether it is quantized (``onnx-query-int8-*``)."""
    from importlib.metadata import version

    import transformers

    digest = hashlib.sha256()
    config = exported.config.to_dict()
    described = {
        "format": GRAPH_FORMAT,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        # Their versions without importing them (the exporter imports them when it runs).
        "exporter": [version("onnx"), version("onnxscript"), version("onnxruntime")],
        "class": f"{type(exported).__module__}.{type(exported).__qualname__}",
        "attention": getattr(exported.config, "_attn_implementation", None),
        "config": {k: v for k, v in config.items() if not k.startswith("_")},
    }
    if int8:  # float32 keys stay as they were: graphs stored before remain valid
        described["int8"] = "dynamic, per channel, MatMul"
    digest.update(json.dumps(described, sort_keys=True, default=str).encode())
    for name, tensor in _named_tensors(exported).items():
        values = tensor.detach().float().contiguous().numpy()
        digest.update(f"{name}:{list(values.shape)}".encode())
        digest.update(memoryview(values).cast("B"))
    kind = "onnx-query-int8" if int8 else "onnx-query"
    return Path(cache_dir) / f"{kind}-{digest.hexdigest()[:32]}.onnx"


def _store(path: Path, model: bytes) -> bool:
    """Write ``model`` to ``path`` whole (a temporary file in the same folder, renamed);
    whether it could."""
    handle, temporary = tempfile.mkstemp(prefix=".building-", suffix=".onnx", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(model)
        shared_mode(temporary)
        os.replace(temporary, path)
        return True
    except OSError as exc:  # a full or read-only cache: this process still has its session
        logger.warning("Could not store the query graph %s: %s", path, exc)
        return False
    finally:
        Path(temporary).unlink(missing_ok=True)


def prune(cache_dir: str | os.PathLike[str], keep: Path | None = None) -> list[Path]:
    """Delete the stored graphs unused for ``UNUSED_DAYS`` days (loading one touches it) and
    abandoned builds, except ``keep``; returns what was deleted."""
    limits = {
        "onnx-query-*.onnx": UNUSED_DAYS * 86400,
        ".building-*.onnx": ABANDONED_BUILD_HOURS * 3600,
    }
    return prune_files(cache_dir, limits, keep, "exported query graph")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
