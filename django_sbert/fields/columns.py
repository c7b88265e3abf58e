"""What an ``EmbeddingField``'s columns hold: the text hash stored in ``<name>_hash``, computed
in Python (``text_hash``) and in SQL (``Sha256Hex``), a vector in pgvector's text form, as
every query and write sends it, and the pgvector type of each precision.

``Sha256Hex`` is the PostgreSQL twin of ``text_hash``: the two must agree byte for byte, or
every row would look stale.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import numpy as np
from django.db import models
from django.db.models import Func, TextField

# EmbeddingField(precision=...): the pgvector type that stores each precision.
PRECISIONS = {"float32": "vector", "float16": "halfvec"}

# Fields whose Python str() and PostgreSQL ::text agree, so the SQL hash matches text_hash().
TEXT_FIELD_TYPES = (models.CharField, models.TextField)


def text_hash(text: str) -> str:
    """sha256 hex digest of ``text`` encoded as UTF-8: what ``<field>_hash`` stores."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Sha256Hex(Func):
    """``encode(sha256(convert_to(text, 'UTF8')), 'hex')``: PostgreSQL's twin of text_hash()."""

    template = "ENCODE(SHA256(CONVERT_TO(%(expressions)s, 'UTF8')), 'hex')"
    output_field = TextField()


class ConcatWS(Func):
    """``concat_ws(separator, a, b, ...)``; the separator is passed as a query parameter."""

    function = "CONCAT_WS"
    output_field = TextField()


def vector_literal(vector: Any) -> str:
    """A vector in pgvector's text form, ``[0.1,0.2,...]``, for SQL parameters.

    ``.9g`` round-trips float32 exactly and keeps the text short; every query and write sends
    vectors this way.
    """
    values = np.asarray(vector, dtype=np.float32).tolist()
    # One %-format of the whole vector: about twice as fast as formatting each value.
    return "[" + _literal_format(len(values)) % tuple(values) + "]"


@functools.lru_cache(maxsize=16)
def _literal_format(dimensions: int) -> str:
    return ",".join(["%.9g"] * dimensions)
