"""Which inference path each encoder takes in this process, and why (``encoder.paths``).

``encoder_path(name)`` applies the encoder's settings (``COMPILE``, ``PRECISION``,
``QUANTIZE``, ``DEVICE``) to this host's CPU and compiler; ``serving.cache`` loads encoders
with it, and ``sbert_status`` and the health view show it::

    path_report("default")
    # {"encoder": "default", "path": "compiled float32", "compile": True, "dtype": "float32",
    #  "quantize": None, "reason": "...", "cpu": "AMD EPYC (torch AVX512; avx2 avx512f ...)"}
"""

from __future__ import annotations

import functools
from typing import Any

from ..conf import encoder_config
from ..encoder.paths import (
    CpuFeatures,
    EncoderPath,
    Role,
    bf16_measured,
    choose_path,
    compiler_available,
    cpu_features,
    onnxruntime_missing,
)


@functools.cache
def host_features() -> tuple[CpuFeatures, bool]:
    """This host's CPU features and whether a C++ compiler is found (read once per process)."""
    return cpu_features(), compiler_available()


@functools.cache
def onnxruntime_problem() -> str | None:
    """Why ONNX Runtime cannot be used in this process, or None (looked up once)."""
    return onnxruntime_missing()


def encoder_path(name: str = "default", role: Role = "both") -> EncoderPath:
    """The path encoder ``name`` takes on this host (see ``encoder.paths.choose_path``)."""
    config = encoder_config(name)
    cpu, compiler = host_features()
    return choose_path(
        role,
        compile=config["COMPILE"],
        precision=config["PRECISION"],
        quantize=config["QUANTIZE"],
        device=str(config["DEVICE"] or "cpu"),
        cpu=cpu,
        compiler=compiler,
        bf16_measured=bf16_measured(config["MODEL"]),
        query_runtime=config["QUERY_RUNTIME"],
        onnxruntime_missing=onnxruntime_problem(),
    )


def path_report(name: str = "default", role: Role = "both") -> dict[str, Any]:
    """``encoder_path`` as plain data, with the CPU it was chosen for (status, health view)."""
    path = encoder_path(name, role)
    cpu, _ = host_features()
    return {
        "encoder": name,
        "path": path.label,
        "queries": path.query_label,
        "compile": path.compile,
        "dtype": path.dtype,
        "quantize": path.quantize,
        "reason": path.reason,
        "cpu": cpu.describe(),
    }
