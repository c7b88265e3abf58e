"""The ML core: a Sentence-BERT bi-encoder on torch + transformers. No Django imports here.

``SentenceEncoder`` is exposed lazily so that ``django_sbert.encoder.spec`` (which reads a
model's configuration without torch) can be imported by the Django layer without paying for
``import torch``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .spec import (
    ModelNotFoundError,
    ModelSpec,
    UnsupportedModelError,
    describe,
    resolve_model_path,
)

if TYPE_CHECKING:
    from .model import SentenceEncoder

__all__ = [
    "ModelNotFoundError",
    "ModelSpec",
    "SentenceEncoder",
    "UnsupportedModelError",
    "describe",
    "resolve_model_path",
]


def __getattr__(name: str) -> Any:
    if name == "SentenceEncoder":
        from .model import SentenceEncoder

        return SentenceEncoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
