"""Matryoshka vectors: the first ``d`` dimensions of a vector, re-normalized to unit length.

An encoder trained with the ``matryoshka`` loss (losses.py) packs the most useful information
into the first dimensions, so its vectors cut to 256 or 128 dimensions still rank well; one
not trained for it loses much more (docs/scale.md has the measured figures). Truncating then
re-normalizing keeps cosine similarity equal to the dot product, as the full vectors have it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def truncate(vectors: Any, dimensions: int) -> np.ndarray:
    """``vectors`` (one vector, or a 2-D array of them) cut to their first ``dimensions``
    values and scaled back to unit length, as float32.

    Vectors that already have ``dimensions`` values are returned unchanged (not re-normalized:
    a vector stored or given at the right size is taken as it is). A zero vector stays zero.
    """
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim not in (1, 2):
        raise ValueError(f"truncate() takes a vector or a 2-D array, got shape {array.shape}")
    width = array.shape[-1]
    if dimensions < 1 or dimensions > width:
        raise ValueError(f"cannot truncate {width}-dimensional vectors to {dimensions} dimensions")
    if dimensions == width:
        return array
    cut = array[..., :dimensions]
    norms = np.linalg.norm(cut, axis=-1, keepdims=True)
    return (cut / np.maximum(norms, 1e-12)).astype(np.float32)
