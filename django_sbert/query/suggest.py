"""Search-as-you-type: suggestions for the text a visitor has typed so far.

::

    Article.objects.suggest("central bank inter")         # [Suggestion(pk, label, url, ...)]
    Article.objects.filter(published=True).suggest("infl", k=8)

Two sides, fused as ``hybrid_search()`` fuses its own (reciprocal rank fusion): a **prefix
match** on the field's keyword column (every finished word must occur, the last one, still
being typed, is a prefix, within ``STEM_SLACK`` characters of a stem; at most ``MAX_ROWS``
rows ranked), and a **vector search** of the whole text so far. The tsquery is written from the
words alone (letters and digits; never the visitor's own syntax), so no input can make it fail.
Shorter than ``MIN_CHARS`` (2): nothing; shorter than ``VECTOR_MIN_CHARS`` (4): the prefix
match alone; then both. docs/hybrid.md ("Search-as-you-type") gives the reasons and figures.

Each suggestion has a ``label`` (the field's first source field, else ``str(row)``) and the
row's ``get_absolute_url()`` when the model has one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.postgres.search import SearchQueryField, SearchRank
from django.db import models
from django.db.models import Expression, F

from ..conf import sbert_settings
from ..exceptions import EncoderAway
from ..fields import EmbeddingField, embedding_fields
from ..keyword import tsquery
from .fusion import CappedMatch
from .options import SearchOptions, search_options

# Letters and digits: what a word of the tsquery may hold (an underscore splits words too, as
# PostgreSQL's parser does).
WORD = re.compile(r"[^\W_]+")
# The most characters a stemmer cuts from a word's end that the unfinished word may still hold
# ("informat" -> inform), and the shortest stem tried that way.
STEM_SLACK = 4
MIN_STEM = 3
MAX_WORDS = 16  # the last words of a longer text count
MIN_CHARS = 2  # a shorter text (spaces aside) suggests nothing
# A shorter text is answered by the prefix match alone, with no vector search (measured in
# benchmarks/suggest.py: a vector of 1-3 letters finds little).
VECTOR_MIN_CHARS = 4
CANDIDATES = 20  # rows taken from each side before fusing
MAX_ROWS = 1000  # prefix matches ranked at most


@dataclass(frozen=True)
class Suggestion:
    """One suggested row: what to show, where it leads, and how it was found."""

    pk: Any
    label: str
    url: str | None
    score: float  # the fused score: sum over the sides of 1 / (rrf_k + rank)
    keyword_rank: int | None  # position (from 1) among the prefix matches; None: not there
    vector_rank: int | None  # position (from 1) among the nearest rows; None: not there
    object: models.Model = field(repr=False, compare=False)


def prefix_words(text: str) -> tuple[list[str], str | None]:
    """(the finished words, the unfinished last word or None) of ``text``, lower case.

    The last word is unfinished when the text ends inside it; ``"central ban"`` is
    ``(["central"], "ban")``, ``"central bank "`` is ``(["central", "bank"], None)``.
    """
    words = WORD.findall(text.lower())[-MAX_WORDS:]
    if words and text[-1:].isalnum():
        return words[:-1], words[-1]
    return words, None


def _quoted(word: str) -> str:
    # WORD holds no quote or backslash; escaped all the same, so the literal stays one lexeme.
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


class PrefixQuery(Expression):
    """The tsquery of a text being typed: its finished words, AND the last one as a prefix::

        to_tsquery(config, $$'central' & 'bank'$$)
        && (to_tsquery(config, $$'inter':*$$)
            || to_tsquery('simple', $$'inter':* | 'inte' | 'int'$$))

    A stop word among the finished words drops out (an empty tsquery ANDs to the other side).
    """

    output_field = SearchQueryField()

    def __init__(self, config: str, finished: Sequence[str], last: str | None) -> None:
        super().__init__()
        self.config = config
        self.finished = tuple(finished)
        self.last = last

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        parts, params = [], []
        if self.finished:
            parts.append("to_tsquery(%s::regconfig, %s)")
            params += [self.config, " & ".join(_quoted(w) for w in self.finished)]
        if self.last:
            shorter = [self.last[:n] for n in range(len(self.last) - 1, MIN_STEM - 1, -1)][
                :STEM_SLACK
            ]
            variants = " | ".join([f"{_quoted(self.last)}:*", *map(_quoted, shorter)])
            parts.append("(to_tsquery(%s::regconfig, %s) || to_tsquery('simple'::regconfig, %s))")
            params += [self.config, f"{_quoted(self.last)}:*", variants]
        return "(" + " && ".join(parts) + ")", params


def prefix_matches(
    queryset: models.QuerySet,
    embedding: EmbeddingField,
    text: str,
    n: int,
    max_rows: int | None = None,
) -> list[Any]:
    """Primary keys of the ``n`` best rows matching ``text`` as it is being typed, best first
    (``ts_rank_cd``, ties by pk); [] for a text without words."""
    finished, last = prefix_words(text)
    if not finished and last is None:
        return []
    column = embedding.tsvector_field_name
    query = PrefixQuery(embedding.keyword_config, finished, last)
    matches = tsquery.Matches(F(column), query)
    limit = max_rows if max_rows is not None else MAX_ROWS
    rank = SearchRank(F(column), query, weights=list(tsquery.RANK_WEIGHTS), cover_density=True)
    rows = (
        queryset.filter(CappedMatch(matches, limit))
        .annotate(_sbert_prefix_rank=rank)
        .order_by(F("_sbert_prefix_rank").desc(), "pk")
        .values_list("pk", flat=True)[:n]
    )
    with search_options(queryset.db, SearchOptions.without_index_settings(n), pipelined=True):
        return list(rows)


def fuse(
    keyword: Sequence[Any], vector: Sequence[Any], rrf_k: float
) -> list[tuple[Any, float, int | None, int | None]]:
    """(pk, score, keyword rank, vector rank), best first: reciprocal rank fusion of the two
    lists, ``1 / (rrf_k + rank)`` from each list a row is in. Ties go to the prefix match
    (the words the visitor sees in the label), then to the nearer row."""
    keyword_rank = {pk: i for i, pk in enumerate(keyword, start=1)}
    vector_rank = {pk: i for i, pk in enumerate(vector, start=1)}
    rows: list[tuple[Any, float, int | None, int | None]] = []
    for pk in dict.fromkeys([*keyword, *vector]):
        kr, vr = keyword_rank.get(pk), vector_rank.get(pk)
        score = sum(1.0 / (rrf_k + r) for r in (kr, vr) if r is not None)
        rows.append((pk, score, kr, vr))
    big = len(rows) + 1
    rows.sort(key=lambda row: (-row[1], row[2] or big, row[3] or big))
    return rows


def label_of(row: models.Model, embedding: EmbeddingField) -> str:
    """The field's first source field (a title, usually), else ``str(row)``."""
    sources = embedding.source_fields
    if sources:
        value = getattr(row, sources[0], None)
        if value not in (None, ""):
            return str(value)
    return str(row)


def url_of(row: models.Model) -> str | None:
    get_url = getattr(row, "get_absolute_url", None)
    return str(get_url()) if callable(get_url) else None


def suggest(
    queryset: models.QuerySet,
    text: str,
    k: int | None = None,
    field: str | None = None,
    *,
    candidates: int | None = None,
) -> list[Suggestion]:
    """Up to ``k`` rows of ``queryset`` (a SemanticQuerySet) for the text typed so far, best
    first; see the module docstring. ``candidates`` rows come from each side (default
    ``CANDIDATES``, at least ``k``)."""
    if not isinstance(text, str):
        raise TypeError(f"suggest() takes the text typed so far, not {type(text).__name__}.")
    tsquery.check_text(text)
    search = sbert_settings.SEARCH
    k = int(search["SUGGEST"]["K"] if k is None else k)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}.")
    n = max(k, int(candidates or CANDIDATES))
    embedding = _suggest_field(queryset, field)
    typed = " ".join(text.split())  # what counts: the words, one space apart
    if len(typed) < MIN_CHARS:
        return []
    qs = queryset._pinned()
    keyword: list[Any] = []
    if embedding.has_keyword_search:  # a space typed last says the last word is finished
        keyword = prefix_matches(qs, embedding, typed + text[len(text.rstrip()) :][:1], n)
    vector: list[Any] = []
    if len(typed) >= VECTOR_MIN_CHARS or not embedding.has_keyword_search:
        try:
            ranked = qs.similar_to(typed, k=n, field=embedding.name)
            vector = list(ranked.values_list("pk", flat=True))
        except EncoderAway:  # the host's query server is away: the prefix match alone
            if not embedding.has_keyword_search:
                raise
    fused = fuse(keyword, vector, float(search["FUSION"]["RRF_K"]))[:k]
    if not fused:
        return []
    wide = [embedding.attname]
    if embedding.has_keyword_search:
        wide.append(embedding.tsvector_field_name)
    rows = qs.defer(*wide).in_bulk([pk for pk, *_ in fused])
    return [
        Suggestion(pk, label_of(row, embedding), url_of(row), score, kr, vr, row)
        for pk, score, kr, vr in fused
        if (row := rows.get(pk)) is not None
    ]


def _suggest_field(queryset: Any, name: str | None) -> EmbeddingField:
    """The field named, else the one with a keyword column, else the model's one field."""
    if name is None:
        with_keywords = [f for f in embedding_fields(queryset.model) if f.has_keyword_search]
        if len(with_keywords) == 1:
            return with_keywords[0]
    return queryset._embedding_field(name)
