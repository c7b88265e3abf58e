"""A stable id of a model directory's files, the same on every machine that holds them.

No Django here: benchmarks and the encoder's own tools key caches by it before any settings
exist. ``django_sbert.serving.identity`` builds version strings from it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

# Files whose content identifies a model; weights are identified by size plus head and tail.
_CONFIG_SUFFIXES = (".json", ".txt", ".model")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx")
_SAMPLE_BYTES = 1 << 20


def model_fingerprint(directory: str | os.PathLike[str]) -> str:
    """A hex digest of a model directory that changes when its configuration or weights do.

    Reads every config/tokenizer file and the first and last MiB of each weights file, so it is
    cheap for large models and identical on every machine holding the same files (no mtimes).
    """
    root = Path(directory)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(".") or "/." in relative:
            continue
        if path.suffix in _CONFIG_SUFFIXES:
            digest.update(relative.encode() + b"\0" + path.read_bytes())
        elif path.suffix in _WEIGHT_SUFFIXES:
            size = path.stat().st_size
            digest.update(f"{relative}\0{size}\0".encode())
            with path.open("rb") as handle:
                digest.update(handle.read(_SAMPLE_BYTES))
                handle.seek(max(0, size - _SAMPLE_BYTES))
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()
