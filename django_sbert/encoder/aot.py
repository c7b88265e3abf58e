"""The single-query graph compiled ahead of time and kept on disk, so a new process loads it.

A package (``.pt2``, exported by ``torch.export`` and built by AOTInductor) loads in a fraction
of a second, without Dynamo, tracing or a compiler (docs/encoder.md, "Cold start")::

    graph = query_graph(transformer, cache_dir)   # load the package, or build and store it
    graph(input_ids, attention_mask)              # last_hidden_state, (1, seq, hidden)

**One package per architecture.** The weights are handed to the package at load time
(``load_constants(..., user_managed=True)``: nothing is copied), so every version of one
architecture loads it. ``package_key`` covers all the generated code depends on, the CPU's
instruction sets and ``PACKAGE_FORMAT`` (bumped whenever this module exports differently).

**Pruned.** Loading a package touches it; building a new one deletes the packages no
process loaded for ``UNUSED_DAYS`` days (a torch upgrade or a new architecture leaves the old
ones behind) and the temporary files of builds that died (``prune``).

**Safe to share.** Processes of a host build an entry one at a time (an ``fcntl`` lock per
entry) and write it to a temporary file renamed into place, so a package is complete or
absent. A package that does not load or whose output differs from the eager transformer's on
a probe input (a damaged file, a library built for another host) is deleted and rebuilt, with
one warning.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import platform
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .exceptions import PackageError
from .filemodes import shared_mode

logger = logging.getLogger("django_sbert.encoder")

# Bump when the exported module, the export settings or the key change: old entries are
# then never loaded again (``prune`` deletes them once they have gone unused long enough).
PACKAGE_FORMAT = 1

# A package no process has loaded for this long is deleted when a new one is built: entries
# of an older torch, transformers or architecture are never loaded again.
UNUSED_DAYS = 30
# A temporary file of a build this old was left by a process that died while building.
ABANDONED_BUILD_HOURS = 6

# CPU flags (/proc/cpuinfo) that decide which vector instructions Inductor's generated code
# uses. A package built on a CPU with one of them must not be loaded on a CPU without it.
ISA_FLAGS = frozenset(
    {
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx_vnni",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    }
)

# Largest difference from the eager transformer accepted on the probe input, per dtype.
PROBE_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-2}
PROBE_LENGTH = 8

# What this process did with packages: "built", "loaded", "rebuilt" (after a bad entry).
stats: Counter[str] = Counter()


class QueryModule(nn.Module):
    """What is exported: one tokenized text in, the token states out."""

    def __init__(self, transformer: nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.transformer(input_ids=input_ids, attention_mask=attention_mask)[0]


def package_key(transformer: nn.Module) -> str:
    """The cache key of ``transformer``'s query graph: the same for every version of it."""
    import transformers

    from .paths import cpu_features

    config = transformer.config.to_dict()
    architecture = {k: v for k, v in config.items() if not k.startswith("_")}
    for varying in ("transformers_version", "name_or_path", "torch_dtype", "dtype"):
        architecture.pop(varying, None)
    cpu = cpu_features()
    described = {
        "format": PACKAGE_FORMAT,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": [sys.platform, platform.machine()],
        "capability": cpu.capability,
        "isa": sorted(cpu.flags & ISA_FLAGS),
        "class": f"{type(transformer).__module__}.{type(transformer).__qualname__}",
        "attention": getattr(transformer.config, "_attn_implementation", None),
        "config": architecture,
        "tensors": [
            [name, list(tensor.shape), str(tensor.dtype)]
            for name, tensor in _named_tensors(transformer).items()
        ],
    }
    blob = json.dumps(described, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def package_path(cache_dir: str | os.PathLike[str], transformer: nn.Module) -> Path:
    """Where ``transformer``'s query graph is (or will be) stored under ``cache_dir``."""
    return Path(cache_dir) / f"query-{package_key(transformer)}.pt2"


class QueryGraph:
    """A loaded package bound to one transformer's weights; call it like ``QueryModule``."""

    def __init__(self, path: Path, transformer: nn.Module) -> None:
        self.path = path
        self.transformer = transformer
        try:
            self._loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
            self._fqns = list(self._loader.get_constant_fqns())
        except Exception as exc:  # a damaged archive or a library that does not load here
            raise PackageError(f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from exc
        self._bound: list[int] = []
        self._constants: dict[str, torch.Tensor] = {}
        self._bind_lock = threading.Lock()
        self._bind()

    def _bind(self) -> None:
        """Hand the transformer's current tensors to the library (no copy), keeping them alive."""
        tensors = _named_tensors(self.transformer)
        constants = {}
        for fqn in self._fqns:
            name = fqn.removeprefix("transformer.")
            if name not in tensors:
                raise PackageError(f"the package expects a tensor {name!r} the model lacks")
            constants[fqn] = tensors[name]
        self._loader.load_constants(constants, False, True, True, False)
        self._constants = constants  # the library holds raw pointers: these must stay alive
        # Where each tensor lives (module, attribute): checked on every call, cheaply.
        self._slots = [
            _slot(self.transformer, fqn.removeprefix("transformer.")) for fqn in self._fqns
        ]
        self._bound = [tensor.data_ptr() for tensor in constants.values()]

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Weights replaced (not changed in place) since binding, e.g. by .to(dtype): rebind.
        # Slots, not a walk of the module tree (named_parameters): this runs on every query,
        # and the modules' own dicts, not getattr (nn.Module.__getattr__ is 7x slower here).
        current = [tensors[name].data_ptr() for tensors, name in self._slots]
        if current != self._bound:
            with self._bind_lock:
                self._bind()
        return self._loader.run([input_ids.contiguous(), attention_mask.contiguous()])[0]


def query_graph(transformer: nn.Module, cache_dir: str | os.PathLike[str]) -> QueryGraph:
    """``transformer``'s query graph from ``cache_dir``, built and stored there if absent.

    Building exports and compiles (tens of seconds for a 6-layer model on two cores): call
    this where a process warms up, never on a request. A bad entry warns once and is rebuilt;
    a failed build raises (the caller falls back to another path).
    """
    started = time.perf_counter()
    path = package_path(cache_dir, transformer)
    path.parent.mkdir(parents=True, exist_ok=True)
    graph = _load_checked(path, transformer)
    waited = ""
    if graph is None:
        with _entry_lock(path):
            graph = _load_checked(path, transformer)  # another process may have built it
            if graph is None:
                _build(path, transformer)
            waited = " (built by another process meanwhile)"
    if graph is not None:
        stats["loaded"] += 1
        # A server's log shows whether a process had its graph before it said it was ready.
        logger.info(
            "Loaded the compiled query graph %s in %.1f s%s.",
            path.name,
            time.perf_counter() - started,
            waited,
        )
        return graph
    stats["built"] += 1
    prune(path.parent, keep=path)
    graph = QueryGraph(path, transformer)
    _probe(graph)
    logger.info(
        "Built the compiled query graph %s in %.1f s (stored for this host's later processes).",
        path.name,
        time.perf_counter() - started,
    )
    return graph


def prune(cache_dir: str | os.PathLike[str], keep: Path | None = None) -> list[Path]:
    """Delete the packages of ``cache_dir`` unused for ``UNUSED_DAYS`` days (a load touches a
    package) and builds abandoned for ``ABANDONED_BUILD_HOURS`` hours, except ``keep``.

    Returns what was deleted. A package another process loads at this moment is safe: a
    loaded library stays mapped after its file is deleted, and a package in use is recent.
    """
    limits = {
        "query-*.pt2": UNUSED_DAYS * 86400,
        ".building-*.pt2": ABANDONED_BUILD_HOURS * 3600,
    }
    return prune_files(cache_dir, limits, keep, "compiled query graph")


def prune_files(
    cache_dir: str | os.PathLike[str],
    limits: dict[str, float],
    keep: Path | None = None,
    what: str = "file",
) -> list[Path]:
    """Delete the files of ``cache_dir`` matching each pattern of ``limits`` whose last
    modification is older than its seconds (and their ``.lock``), except ``keep``; logs how
    many ``what`` went."""
    now = time.time()
    deleted = []
    for pattern, seconds in limits.items():
        for path in Path(cache_dir).glob(pattern):
            try:
                if path == keep or now - path.stat().st_mtime < seconds:
                    continue
                path.unlink()
                path.with_suffix(".lock").unlink(missing_ok=True)
            except FileNotFoundError:  # another process pruned it first
                continue
            deleted.append(path)
    if deleted:
        logger.info("Deleted %d unused %s(s) from %s", len(deleted), what, cache_dir)
    return deleted


def _load_checked(path: Path, transformer: nn.Module) -> QueryGraph | None:
    """The package at ``path`` when present and sound; a bad one is deleted with a warning."""
    if not path.exists():
        return None
    try:
        graph = QueryGraph(path, transformer)
        _probe(graph)
        with suppress(OSError):  # a read-only cache still serves; it is just never pruned
            os.utime(path)  # used now: pruning keeps it
        return graph
    except PackageError as exc:
        message = (
            f"The compiled query graph {path} cannot be used ({exc}); it is deleted and "
            "compiled again."
        )
        logger.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        stats["rebuilt"] += 1
        path.unlink(missing_ok=True)
        return None


def _probe(graph: QueryGraph) -> None:
    """Compare the package's output with the eager transformer's on a fixed input."""
    transformer = graph.transformer
    difference = probe(graph, transformer, PackageError)
    tolerance = PROBE_TOLERANCE.get(next(transformer.parameters()).dtype, 5e-2)
    if difference > tolerance:
        raise PackageError(f"its output differs from the model's by {difference:.2g}")


def probe(
    run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    transformer: nn.Module,
    error: type[Exception],
) -> float:
    """Run ``run`` (a graph built from ``transformer``) and the eager transformer on one fixed
    input; the largest difference of their outputs. Raises ``error`` when ``run`` fails, or
    its output has the wrong shape or is not finite."""
    got, expected = probe_outputs(run, transformer, error)
    return float((got.float() - expected.float()).abs().max())


def probe_outputs(
    run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    transformer: nn.Module,
    error: type[Exception],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``run``'s output and the eager transformer's on the probe input (see ``probe``)."""
    vocabulary = int(getattr(transformer.config, "vocab_size", 100))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocabulary, (1, PROBE_LENGTH), generator=generator)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        expected = QueryModule(transformer)(ids, mask)
        try:
            got = run(ids, mask)
        except Exception as exc:
            raise error(f"running it failed: {type(exc).__name__}: {exc}") from exc
    if got.shape != expected.shape or not torch.isfinite(got).all():
        raise error("its output has the wrong shape or is not finite")
    return got, expected


def _build(path: Path, transformer: nn.Module) -> None:
    """Export and compile the query graph into ``path`` (a temporary file renamed into place)."""
    import torch._inductor  # compiling needs Inductor; loading a package does not

    module = QueryModule(transformer).eval()
    maximum = int(getattr(transformer.config, "max_position_embeddings", 512))
    sample = torch.zeros((1, PROBE_LENGTH), dtype=torch.long)
    sequence = torch.export.Dim("sequence", min=2, max=max(maximum, PROBE_LENGTH))
    dynamic = {"input_ids": {1: sequence}, "attention_mask": {1: sequence}}
    with torch.no_grad():
        exported = torch.export.export(
            module, (sample, torch.ones_like(sample)), dynamic_shapes=dynamic
        )
    handle, temporary = tempfile.mkstemp(prefix=".building-", suffix=".pt2", dir=path.parent)
    os.close(handle)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch's own pytree deprecation
            torch._inductor.aoti_compile_and_package(
                exported,
                package_path=temporary,
                inductor_configs={
                    # The weights are handed over at load time: one package for every version.
                    "aot_inductor.package_constants_in_so": False,
                    # Kernels use the caller's torch thread count (QUERY_THREADS).
                    "cpp.dynamic_threads": True,
                },
            )
        shared_mode(temporary)  # mkstemp made it 0600: readable by other users as the umask says
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _slot(transformer: nn.Module, name: str) -> tuple[dict[str, Any], str]:
    """Where the parameter or buffer ``name`` ("encoder.layer.0.x.weight") lives: its module's
    ``_parameters`` or ``_buffers`` (what assigning the attribute replaces), and its key."""
    path, _, attribute = name.rpartition(".")
    module = transformer.get_submodule(path) if path else transformer
    tensors = module._parameters if attribute in module._parameters else module._buffers
    return tensors, attribute


def _named_tensors(transformer: nn.Module) -> dict[str, torch.Tensor]:
    tensors = dict(transformer.named_parameters())
    tensors.update(transformer.named_buffers())
    return tensors


@contextmanager
def _entry_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on one entry among the processes of this host (``fcntl.flock``)."""
    with path.with_suffix(".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
