"""Long texts searched by their passages: the field's option and its passage table.

::

    from django_sbert.passages import PassageConfig

    embedding = EmbeddingField(source=("title", "body"), passages=True)
    embedding = EmbeddingField(source=("title", "body"), passages=PassageConfig(max_tokens=128))

Modules: ``config`` (``PassageConfig``), ``table`` (the passage model each such field makes).
The splitter is ``django_sbert.encoder.passages``; writing passages is
``indexing/passages.py``, searching them ``query/passages.py``, switching them at a promotion
``finetuning/passages.py``. See docs/passages.md.
"""

from __future__ import annotations

from .config import DOCUMENT_VECTORS, PassageConfig, passage_config, passage_limit
from .table import PassageVectorField, make_passage_model, passage_model_name, passages_exist

__all__ = [
    "DOCUMENT_VECTORS",
    "PassageConfig",
    "PassageVectorField",
    "make_passage_model",
    "passage_config",
    "passage_limit",
    "passage_model_name",
    "passages_exist",
]
