"""Which sentence of a result's passage answers the query: for highlighting search results.

A search by passages returns each row's best passage (``row.passage``, a few hundred words);
a page that shows it can point at the one sentence that matches the query best::

    from django_sbert.query.highlight import best_sentences

    rows = list(Article.objects.similar_to(q)[:10])
    marks = best_sentences(q, [row.passage["text"] for row in rows])
    # marks[i]: Highlight(start, end, similarity) inside rows[i].passage["text"], or None

or let ``highlight_hits(rows, q)`` give each row a ``snippet`` (the best sentence with some
of the passage around it), which ``{% sbert_passage row %}`` renders escaped. All the sentences
are encoded in one call with the serving version: tens of milliseconds for a page of ten, so
call it for the page shown, not for a whole ranking.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from django.db.models import Model

from ..encoder.sentences import sentence_spans
from ..serving import encode_query, encode_texts
from ..serving.query_client import light

ELLIPSIS = "…"


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


@dataclass(frozen=True)
class Snippet:
    """What a result shows of its best passage: the sentence nearest to the query (``match``)
    and up to ``context_chars`` of the passage on each side, cut at a word ("…" where cut)."""

    before: str
    match: str
    after: str

    def __str__(self) -> str:
        return f"{self.before}{self.match}{self.after}"


def snippet(text: str, mark: Highlight, context_chars: int = 140) -> Snippet:
    """``text`` around ``mark``: the context is cut at a word boundary and the cut marked "…"."""
    before = text[max(0, mark.start - context_chars) : mark.start]
    after = text[mark.end : mark.end + context_chars]
    if mark.start > context_chars:  # cut inside the text before: drop the partial word
        before = ELLIPSIS + before.split(" ", 1)[-1]
    if len(text) - mark.end > context_chars:  # likewise after
        after = after.rsplit(" ", 1)[0] + ELLIPSIS
    return Snippet(before, text[mark.start : mark.end], after)


def highlight_hits(
    hits: Iterable[Model], query: str, *, encoder: str = "default", context_chars: int = 140
) -> None:
    """Set ``hit.snippet`` (a ``Snippet``) on each hit that carries a best passage
    (``hit.passage["text"]``, from a search by passages); other hits are left alone.

    The sentences of all those passages are encoded in one call, so call it for the page shown.
    A light web process (``SBERT["QUERY_SERVER"]["SOCKET"]`` a path) loads no model to encode
    them: its hits keep their passage without a mark.
    """
    found = [hit for hit in hits if (getattr(hit, "passage", None) or {}).get("text")]
    if not found or light():
        return
    texts = [hit.passage["text"] for hit in found]
    marks = best_sentences(query, texts, encoder)
    for hit, text, mark in zip(found, texts, marks, strict=True):
        if mark is not None:
            hit.snippet = snippet(text, mark, context_chars)
