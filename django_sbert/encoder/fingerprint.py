"""Stable ids of a model directory's files, the same on every machine that holds them.

No Django here: benchmarks and the encoder's own tools key caches by it before any settings
exist. ``django_sbert.serving.identity`` builds version strings from it.

::

    model_fingerprint("/models/x")   # config/tokenizer files and sampled weights: version ids
    files_fingerprint("/models/x")   # only the files SentenceEncoder.load() reads
    encoder_files("/models/x")       # those files, relative POSIX paths
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

# Files whose content identifies a model; weights are identified by size plus head and tail.
_CONFIG_SUFFIXES = (".json", ".txt", ".model")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx")
_SAMPLE_BYTES = 1 << 20

# What SentenceEncoder.load() reads from a sentence-transformers directory: the root's
# configuration, and in the transformer's and each module's folder the transformers config,
# the tokenizer (AutoTokenizer's files) and the weights (safetensors first, sharded or not).
ROOT_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
MODULE_FILES = (
    "config.json",
    "sentence_bert_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_SHARD_PREFIXES = ("model-", "pytorch_model-")  # model-00001-of-00002.safetensors


def model_fingerprint(directory: str | os.PathLike[str]) -> str:
    """A hex digest of a model directory that changes when its configuration or weights do.

    Reads every config/tokenizer file and the first and last MiB of each weights file, so it is
    cheap for large models and identical on every machine holding the same files (no mtimes).
    Version strings are built from it; ``files_fingerprint`` compares two hosts' copies.
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
            _update_weights(digest, path, relative)
    return digest.hexdigest()


def encoder_files(directory: str | os.PathLike[str]) -> list[str]:
    """The files of ``directory`` that ``SentenceEncoder.load()`` reads, sorted.

    A README, a stray NOTES.txt or another runtime's weights (ONNX, OpenVINO) are not among
    them: two copies that differ only there encode alike.
    """
    root = Path(directory)
    folders = {""}
    modules = root / "modules.json"
    if modules.is_file():
        try:
            entries = json.loads(modules.read_text(encoding="utf-8"))
            folders.update(str(entry.get("path") or "") for entry in entries)
        except (ValueError, TypeError, AttributeError):
            pass  # loading reports a broken modules.json; its bytes are still fingerprinted
    found = {name for name in ROOT_FILES if (root / name).is_file()}
    for folder in folders:
        base = root / folder
        if not base.is_dir():
            continue
        prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
        for path in base.iterdir():
            if not path.is_file():
                continue
            shard = path.name.startswith(_SHARD_PREFIXES) and path.suffix in (
                ".safetensors",
                ".bin",
            )
            if path.name in MODULE_FILES or shard:
                found.add(prefix + path.name)
    return sorted(found)


def files_fingerprint(directory: str | os.PathLike[str]) -> str:
    """A hex digest of only the files the encoder reads (``encoder_files``): the same for two
    copies of a model that encode alike, whatever else their directories hold."""
    root = Path(directory)
    digest = hashlib.sha256()
    for relative in encoder_files(root):
        path = root / relative
        if path.suffix in _WEIGHT_SUFFIXES:
            _update_weights(digest, path, relative)
        else:
            digest.update(relative.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _update_weights(digest: Any, path: Path, relative: str) -> None:
    size = path.stat().st_size
    digest.update(f"{relative}\0{size}\0".encode())
    with path.open("rb") as handle:
        digest.update(handle.read(_SAMPLE_BYTES))
        handle.seek(max(0, size - _SAMPLE_BYTES))
        digest.update(handle.read(_SAMPLE_BYTES))
