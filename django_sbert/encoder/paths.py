"""Which inference path an encoder takes on this CPU: compiled or eager, float32 or bfloat16,
and which runtime encodes a single text (a search query): torch or ONNX Runtime.

A pure function decides (``choose_path``), from the settings and from what the CPU and the
torch build say about themselves, so the decision can be tested with capability strings and
shown to an operator with its reason (``sbert_status``, the health view)::

    cpu = cpu_features()       # torch.backends.cpu.get_cpu_capability() + /proc/cpuinfo flags
    path = choose_path("query", cpu=cpu, compiler=compiler_available())
    path.compile, path.dtype, path.reason

The rules, in order: ``QUANTIZE="int8"`` runs eager int8 (never chosen for you);
``COMPILE="auto"`` compiles on a CPU when a C++ compiler is found; ``PRECISION="auto"`` runs
bfloat16 only with native bf16 instructions *and* a model measured to keep its quality in bf16
(``BF16_MEASURED_MODELS``), as emulated bf16 is several times slower; ``QUERY_RUNTIME="auto"``
encodes single texts through ONNX Runtime where the path is float32 on a CPU and the ``onnx``
extra is installed; ``QUERY_RUNTIME="onnxruntime-int8"`` (never chosen for you, as its
vectors differ a little from float32's) gives that graph int8 weights. docs/encoder.md ("Which
path each process takes") has the table and figures.

The role decides the shapes warmed before traffic: a web process (``"query"``) warms the
single-text graph, an encoding worker (``"document"``) the batch graph (and the single-text
one, since a saved row is a batch of one).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Role = Literal["query", "document", "both"]
# The runtimes that send a single text through an exported ONNX graph (onnx_query.py).
ONNX_RUNTIMES = ("onnxruntime", "onnxruntime-int8")
QUERY_RUNTIMES = ("auto", "torch", *ONNX_RUNTIMES)
Setting = bool | str | None

# CPU flags (/proc/cpuinfo) of native bfloat16 arithmetic: AVX-512 BF16 (Cooper Lake, Zen 4
# and later) and AMX (Sapphire Rapids and later). torch's own capability string must say
# AVX512 too: a build or an ATEN_CPU_CAPABILITY that stops at AVX2 never runs those kernels.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
BF16_CAPABILITIES = frozenset({"AVX512"})

# Models whose bf16 vectors were measured to keep STSb dev Spearman within 0.1 point of
# float32 (benchmarks/encode.py --bf16, docs/benchmarks.md), by the MODEL setting that names
# them (fine-tuned versions of a model count as that model). PRECISION="auto" picks bf16 only
# for these; PRECISION="bfloat16" asks for it for any model.
BF16_MEASURED_MODELS: frozenset[str] = frozenset({"all-MiniLM-L6-v2"})
BF16_MEASURED_NOTE = "bf16 was not measured within 0.1 STSb point of float32 for this model"


def bf16_measured(model: str) -> bool:
    """Whether ``model`` (a MODEL setting) was measured to keep its quality in bf16."""
    return str(model) in BF16_MEASURED_MODELS


@dataclass(frozen=True)
class CpuFeatures:
    """What the CPU and the torch build offer: torch's capability string and the CPU flags."""

    capability: str  # torch.backends.cpu.get_cpu_capability(): "AVX2", "AVX512", "DEFAULT"...
    flags: frozenset[str] = field(default_factory=frozenset)  # /proc/cpuinfo "flags"
    model: str = ""  # /proc/cpuinfo "model name"

    @property
    def native_bf16(self) -> bool:
        """Whether bf16 matrix multiplies run on bf16 units rather than being emulated."""
        return bool(self.flags & BF16_FLAGS) and self.capability.upper() in BF16_CAPABILITIES

    def describe(self) -> str:
        shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in self.flags]
        return f"{self.model or 'CPU'} (torch {self.capability}; {' '.join(shown) or 'no AVX'})"


@dataclass(frozen=True)
class EncoderPath:
    """The path chosen for one encoder: what ``SentenceEncoder.load`` is given, and why."""

    compile: bool
    dtype: Literal["float32", "bfloat16"]
    quantize: str | None
    reason: str
    query_runtime: Literal["torch", "onnxruntime", "onnxruntime-int8"] = "torch"  # one text

    @property
    def label(self) -> str:
        """Short name: ``compiled float32``, ``eager bfloat16``, ``eager int8``..."""
        kind = self.quantize or self.dtype
        return f"{'compiled' if self.compile else 'eager'} {kind}"

    @property
    def query_label(self) -> str:
        """What encodes one search query: ``onnxruntime float32``, ``onnxruntime int8``, or
        ``label``."""
        kinds = {"onnxruntime": "onnxruntime float32", "onnxruntime-int8": "onnxruntime int8"}
        return kinds.get(self.query_runtime, self.label)


def choose_path(
    role: Role,
    *,
    compile: Setting = "auto",
    precision: str = "auto",
    quantize: str | None = None,
    device: str = "cpu",
    cpu: CpuFeatures,
    compiler: bool,
    bf16_measured: bool = False,
    query_runtime: str = "torch",
    onnxruntime_missing: str | None = None,
) -> EncoderPath:
    """The path an encoder with these settings takes on ``cpu``, with the reason in words.

    ``compile``: ``"auto"``, True or False (``COMPILE``); ``precision``: ``"auto"``,
    ``"float32"`` or ``"bfloat16"`` (``PRECISION``); ``compiler``: whether a C++ compiler is
    on the host; ``query_runtime``: ``"auto"``, ``"torch"``, ``"onnxruntime"`` or
    ``"onnxruntime-int8"`` (``QUERY_RUNTIME``), with ``onnxruntime_missing`` saying why ONNX
    Runtime cannot be imported here (None when it can). ``role`` only enters the reason: it
    decides the shapes warmed, not the path.
    """
    if query_runtime not in QUERY_RUNTIMES:
        raise ValueError(
            f"QUERY_RUNTIME must be one of {', '.join(map(repr, QUERY_RUNTIMES))}, "
            f"got {query_runtime!r}."
        )
    if compile not in ("auto", True, False, None):
        raise ValueError(f"COMPILE must be 'auto', True or False, got {compile!r}.")
    if precision not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"PRECISION must be 'auto', 'float32' or 'bfloat16', got {precision!r}.")
    shapes = {"query": "single-query", "document": "batch", "both": "batch and single-query"}
    on_cpu = str(device).split(":")[0] == "cpu"
    if quantize:
        reason = f"QUANTIZE={quantize!r}: int8 kernels, eager (int8 is never chosen for you)"
        if query_runtime in ONNX_RUNTIMES:
            raise ValueError(f"QUERY_RUNTIME={query_runtime!r} runs float models; unset QUANTIZE.")
        return EncoderPath(False, "float32", quantize, reason)

    reasons: list[str] = []
    if precision != "auto":
        dtype = precision
        reasons.append(f"PRECISION={precision!r}")
    elif not on_cpu:
        dtype = "float32"
        reasons.append(f"float32 on {device}")
    elif not cpu.native_bf16:
        dtype = "float32"
        reasons.append(f"float32: no native bf16 on this CPU (torch {cpu.capability})")
    elif not bf16_measured:
        dtype = "float32"
        reasons.append(f"float32: the CPU has native bf16, but {BF16_MEASURED_NOTE}")
    else:
        dtype = "bfloat16"
        reasons.append("bfloat16: native bf16 on this CPU, quality measured within 0.1 point")

    if compile is True:
        compiled = True
        reasons.append(f"COMPILE=True: the compiled {shapes[role]} path")
    elif compile in (False, None):
        compiled = False
        reasons.append("COMPILE=False: eager")
    elif not on_cpu:
        compiled = False
        reasons.append(f"eager on {device} (the compiled path is for CPUs)")
    elif not compiler:
        compiled = False
        reasons.append("eager: no C++ compiler found for torch.compile (install g++)")
    else:
        compiled = True
        reasons.append(f"the compiled {shapes[role]} path (COMPILE='auto', C++ compiler found)")

    runtime: Literal["torch", "onnxruntime", "onnxruntime-int8"] = "torch"
    if query_runtime in ONNX_RUNTIMES:
        if not on_cpu:
            raise ValueError(f"QUERY_RUNTIME={query_runtime!r} runs on the CPU, not on {device}.")
        runtime = query_runtime
        kind = "int8 weights" if runtime == "onnxruntime-int8" else "float32"
        reasons.append(f"single queries through ONNX Runtime in {kind} (QUERY_RUNTIME)")
    elif query_runtime == "auto" and on_cpu:
        if onnxruntime_missing:
            reasons.append(f"single queries through torch: {onnxruntime_missing}")
        elif dtype == "bfloat16":
            reasons.append("single queries through torch in bfloat16, as fast as ONNX Runtime")
        else:
            runtime = "onnxruntime"
            reasons.append("single queries through ONNX Runtime, faster than torch in float32")
    return EncoderPath(compiled, dtype, None, "; ".join(reasons), runtime)


def default_path(role: Role, model: str) -> EncoderPath:
    """The path ``model`` takes on this host with no settings (``"auto"`` everywhere): what
    the serving layer would choose, for scripts that load an encoder without Django."""
    return choose_path(
        role,
        cpu=cpu_features(),
        compiler=compiler_available(),
        bf16_measured=bf16_measured(model),
        query_runtime="auto",
        onnxruntime_missing=onnxruntime_missing(),
    )


def cpu_features() -> CpuFeatures:
    """This machine's ``CpuFeatures``: torch's capability string, /proc/cpuinfo flags (Linux)."""
    import torch  # the capability depends on the torch build: asked only when choosing a path

    capability = str(torch.backends.cpu.get_cpu_capability())
    flags: frozenset[str] = frozenset()
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = frozenset(value.split())
            if model and flags:
                break
    return CpuFeatures(capability, flags, model)


def onnxruntime_missing() -> str | None:
    """Why ONNX Runtime cannot encode queries in this environment, or None when it can (its
    package and the exporter's, ``onnxscript``; found without importing them)."""
    import importlib.util

    for module in ("onnxruntime", "onnxscript", "onnx"):
        if importlib.util.find_spec(module) is None:
            return f'{module} is not installed (pip install "django-sbert[onnx]")'
    return None


def compiler_available() -> bool:
    """Whether the C++ compiler Inductor would use is on the PATH (``CXX``, else g++/clang++)."""
    import os

    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "clang++", "c++"]
    return any(shutil.which(name) for name in names)
