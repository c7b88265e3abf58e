"""The ML core: a Sentence-BERT bi-encoder on torch + transformers. No Django imports here.

``SentenceEncoder`` is exposed lazily so that ``django_sbert.encoder.spec`` (which reads a
model's configuration without torch) can be imported by the Django layer without paying for
``import torch``.

Modules. The model: ``model`` (``SentenceEncoder``: Transformer -> Pooling -> [Dense] ->
[Normalize]), ``spec`` (find a model and read its configuration, without torch),
``transformer``, ``pooling``, ``dense``, ``tokenization``, ``weights`` (safetensors first),
``fingerprint`` (a stable id of a model directory's files), ``filemodes`` (cache files made as
the umask says). Inference: ``paths`` (which path on this CPU), ``compiled``
(``torch.compile``), ``aot`` (its query graph kept on disk), ``onnx_query`` (a query through
ONNX Runtime), ``matryoshka`` (vectors cut to their first dimensions), ``passages`` (long
texts split into passages), ``sentences`` (a text's sentence spans). Training: ``training``
(``fit()``), ``options`` (``FitOptions``, without torch), ``losses``, ``data`` (examples
checked against a loss, and batched), ``mining`` (hard negatives), ``pseudo_queries`` (pairs
cut from unlabelled documents), ``lexical`` (BM25 in memory), ``distillation`` (Margin-MSE
examples from a teacher fusing the model with BM25), ``metrics`` (STS Spearman, retrieval
MRR / nDCG / Recall; ``evaluation``, its former name, kept one release). ``exceptions``: the
errors the core raises.
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
