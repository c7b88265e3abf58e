"""Hard negatives for a run's positive pairs, mined by the base model.

The candidates are the texts of the rows the run's encoder embeds (their stored vectors, so
mining costs no corpus encoding when the rows are current) and the pairs' own texts. A site's
rows are what its searches rank, so their near misses are the distinctions worth learning;
pairs alone still give negatives where no rows are embedded yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..encoder.mining import mine_hard_negatives
from ..indexing import field_refs
from .rows import MINING_ROWS

__all__ = ["mining_corpus", "with_hard_negatives"]


def mining_corpus(
    encoder_name: str, version: str, limit: int | None = None
) -> tuple[list[str], list[Any]]:
    """Texts and stored vectors of rows embedded by ``version`` of ``encoder_name``.

    At most ``limit`` rows (``rows.MINING_ROWS`` when None) over every field of
    the encoder, in primary-key order; rows without a vector or embedded by another version
    are skipped (their vector does not match the base model).
    """
    limit = int(MINING_ROWS if limit is None else limit)
    texts: list[str] = []
    vectors: list[Any] = []
    for ref in field_refs():
        if ref.encoder_name != encoder_name or len(texts) >= limit:
            continue
        column = ref.field.attname
        rows = ref.manager.filter(
            **{ref.version_attname: version, f"{column}__isnull": False}
        ).order_by("pk")[: limit - len(texts)]
        for instance in rows.iterator(chunk_size=500):
            text = ref.field.get_source_text(instance).strip()
            if text:
                texts.append(text)
                vectors.append(getattr(instance, column))
    return texts, vectors


def with_hard_negatives(
    encoder: Any,
    pairs: Sequence[tuple[str, str]],
    *,
    encoder_name: str,
    version: str,
    extra_texts: Sequence[str] = (),
    **options: Any,
) -> list[tuple[str, str, str]]:
    """``(anchor, positive, negative)`` for the pairs a negative was found for.

    Candidates: the rows of ``mining_corpus`` (stored vectors) and ``extra_texts`` plus the
    pairs' positives (encoded here). A pair whose candidates are all positives or presumed
    relevant (``encoder.mining``) is left out. ``options`` go to ``mine_hard_negatives``
    (``max_ratio``, ``top_k``).
    """
    texts, vectors = mining_corpus(encoder_name, version)
    known = set(texts)
    own = [t for t in dict.fromkeys([*(p for _, p in pairs), *extra_texts]) if t not in known]
    if own:
        encoded = np.asarray(encoder.encode(own, normalize=True), dtype=np.float32)
        vectors = [*vectors, *encoded]
        texts = [*texts, *own]
    if not texts:
        return []
    matrix = np.asarray(np.stack([np.asarray(v, dtype=np.float32) for v in vectors]))
    return mine_hard_negatives(encoder, pairs, texts, corpus_vectors=matrix, **options)
