"""What an ``EmbeddingField``'s columns hold, computed in Python: the text hash stored in
``<name>_hash`` and a vector in pgvector's text form, as every query and write sends it.

``fields.Sha256Hex`` is the PostgreSQL twin of ``text_hash``: the two must agree byte for
byte, or every row would look stale.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import numpy as np


def text_hash(text: str) -> str:
    """sha256 hex digest of ``text`` encoded as UTF-8: what ``<field>_hash`` stores."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
