"""Which sentence of a result's passage answers the query: for highlighting search results.

A search by passages returns each row's best passage (``row.passage``, a few hundred words);
a page that shows it can point at the one sentence that matches the query best::

    from django_sbert.query.highlight import best_sentences

    rows = list(Article.objects.similar_to(q)[:10])
    marks = best_sentences(q, [row.passage["text"] for row in rows])
    # marks[i]: Highlight(start, end, similarity) inside rows[i].passage["text"], or None

The sentences of all the passages are encoded in one call (the document prompt, as indexing
encodes), and compared with the query's vector (the query prompt, cached like a search's);
both come from the serving version. Ten passages of ~200 tokens are ~80 short sentences: tens
of milliseconds on a CPU, so call it for the page shown, not for a whole ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..encoder.sentences import sentence_spans
from ..serving import encode_query, encode_texts


@dataclass(frozen=True)
class Highlight:
    """The best sentence of a passage: ``text[start:end]``, and its cosine with the query."""

    start: int
    end: int
    similarity: float


def best_sentences(
    query: str, passages: Sequence[str | None], encoder: str = "default"
) -> list[Highlight | None]:
    """For each passage text, its sentence nearest to ``query`` (None for a None or blank one)."""
    spans = [sentence_spans(text) if text else [] for text in passages]
    sentences = [text[a:b] for text, found in zip(passages, spans, strict=True) for a, b in found]
    if not sentences:
        return [None] * len(passages)
    vectors = encode_texts(sentences, encoder, role="document")  # (sentences, dim), unit
    scores = vectors @ np.asarray(encode_query(query, encoder))  # (sentences,)
    out: list[Highlight | None] = []
    first = 0
    for found in spans:
        if not found:
            out.append(None)
            continue
        own = scores[first : first + len(found)]
        best = int(np.argmax(own))
        out.append(Highlight(found[best][0], found[best][1], float(own[best])))
        first += len(found)
    return out
