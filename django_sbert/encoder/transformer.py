"""Load the Transformer module of a model directory with the attention its class implements.

PyTorch's fused attention (``scaled_dot_product_attention``, "sdpa") is asked for where the
transformers class for the architecture implements it (BERT does); other classes (MPNet, as
of transformers 5) run their own "eager" attention, which is what sentence-transformers gets
for them too. The choice reads the class's ``_supports_sdpa`` flag, resolved from the config
through ``AutoModel``'s own mapping before any weight is read, so nothing is loaded twice and
no error is caught and retried.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .spec import UnsupportedModelError, architecture_name


@contextmanager
def quiet_weight_loading() -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar: a local model loads in well under a
    second, and every worker and web process would print it to its log."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    if shown:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def model_class(config: Any) -> type:
    """The class ``AutoModel.from_pretrained`` builds for ``config`` (a transformers config).

    Mirrors ``AutoModel``: a model type with several base classes picks the one the config's
    ``architectures`` names, else the first.
    """
    from transformers import MODEL_MAPPING

    candidates = MODEL_MAPPING[type(config)]
    if not isinstance(candidates, (list, tuple)):
        return candidates
    by_name = {candidate.__name__: candidate for candidate in candidates}
    for name in getattr(config, "architectures", None) or []:
        if name in by_name:
            return by_name[name]
    return candidates[0]


def attention_implementation(cls: type) -> str:
    """``"sdpa"`` where the transformers class implements it, else ``"eager"`` (its default)."""
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def load_transformer(directory: Path) -> Any:
    """The ``transformers`` model in ``directory`` (weights on the CPU, float32 as saved).

    Raises ``UnsupportedModelError`` naming the architecture when the installed transformers
    has no class for it.
    """
    import transformers
    from transformers import CONFIG_MAPPING, MODEL_MAPPING, AutoConfig, AutoModel

    raw = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    architecture = architecture_name(raw)
    version = transformers.__version__
    if raw.get("model_type") not in CONFIG_MAPPING:
        raise UnsupportedModelError(
            f"{directory}: {architecture}: transformers {version} does not implement this "
            "architecture (its model_type is not one transformers knows), and SentenceEncoder "
            "never runs code from a model directory. Upgrade transformers if a newer release "
            "implements it, or choose a model of a family docs/encoder.md lists."
        )
    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"{directory}: {architecture}: an encoder-decoder model; SentenceEncoder runs "
            "encoder-only transformers (BERT, MPNet, ...) and has no T5-style encoder stack."
        )
    if type(config) not in MODEL_MAPPING:
        raise UnsupportedModelError(
            f"{directory}: {architecture}: transformers {version} has no base model (AutoModel) "
            f"class for {type(config).__name__}, so there are no token states to pool."
        )
    cls = model_class(config)
    with quiet_weight_loading():
        return AutoModel.from_pretrained(
            directory,
            config=config,
            local_files_only=True,
            use_safetensors=(directory / "model.safetensors").exists() or None,
            attn_implementation=attention_implementation(cls),
        )
