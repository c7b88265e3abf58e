"""suggest(): the words of a text being typed, the prefix tsquery, fusion, the short-text rules."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from django.db import connection

from django_sbert.query import Suggestion, suggest
from django_sbert.query.suggest import PrefixQuery, fuse, prefix_words
from django_sbert.serving import encode_query, encoder_version
from tests.testapp.models import Article, Note

# The module (django_sbert.query.suggest is also the function's name in the package).
suggest_module = importlib.import_module("django_sbert.query.suggest")

ROWS = [  # (title, body)
    ("Information retrieval", "Ranking documents for a query."),
    ("Informal meetings", "People meet and talk."),
    ("Happy cats", "A cat sleeps in the sun."),
    ("Interest rates rise", "The central bank raises interest rates."),
    ("The theory of everything", "Physics and its laws."),
]


@pytest.fixture
def rows(db) -> list[Article]:
    objs = [Article.objects.create(title=t, body=b) for t, b in ROWS]
    rng = np.random.default_rng(5)
    for obj in objs:
        vector = rng.standard_normal(encode_query("x").shape[0]).astype(np.float32)
        Article.objects.filter(pk=obj.pk).update(
            embedding=vector / np.linalg.norm(vector), embedding_version=encoder_version()
        )
    return objs


def keyword_hits(text: str, **options) -> list[int]:
    return [s.pk for s in Article.objects.suggest(text, k=10, **options) if s.keyword_rank]


@pytest.mark.parametrize(
    ("text", "finished", "last"),
    [
        ("central ban", ["central"], "ban"),
        ("central bank ", ["central", "bank"], None),
        ("central bank,", ["central", "bank"], None),
        ("Dog's RU", ["dog", "s"], "ru"),
        ("x_y", ["x"], "y"),
        ("?!", [], None),
        ("", [], None),
    ],
)
def test_prefix_words(text, finished, last):
    assert prefix_words(text) == (finished, last)


def test_the_prefix_query_is_written_from_the_words_alone(db):
    query = PrefixQuery("english", ["it's"], "o'brien")
    sql, params = query.as_sql(None, connection)
    assert "%s" in sql and "o'brien" not in sql  # the words travel as parameters
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}::text", params)
        assert cursor.fetchone()[0]  # PostgreSQL took it


def test_a_prefix_a_stemmed_word_and_a_word_past_its_stem(rows):
    info, informal, happy, rates, theory = rows
    assert keyword_hits("infor") == [info.pk, informal.pk]  # both start with "infor"
    # "information" is stored as "inform", which "informat" is no prefix of: the word is found
    # by its shorter forms (so is "informal", stored as "inform" too).
    assert info.pk in keyword_hits("informat")
    assert info.pk in keyword_hits("informatio") and info.pk in keyword_hits("information")
    assert keyword_hits("happy") == [happy.pk]  # stored as "happi" (y -> i)
    assert keyword_hits("interest rates ri") == [rates.pk]
    assert keyword_hits("the") == [theory.pk]  # a stop word typed is still a prefix ("theori")
    assert keyword_hits("the cat") == [happy.pk]  # a finished stop word drops out


def test_title_matches_rank_first(rows):
    info, informal, happy, rates, theory = rows
    found = Article.objects.suggest("interest", k=10)
    assert found[0].pk == rates.pk and found[0].keyword_rank == 1


def test_short_texts(rows, monkeypatch):
    assert Article.objects.suggest("i") == []
    short = Article.objects.suggest("inf", k=10)
    assert short and all(s.vector_rank is None for s in short)
    longer = Article.objects.suggest("info", k=10)
    assert any(s.vector_rank for s in longer)
    monkeypatch.setattr(suggest_module, "VECTOR_MIN_CHARS", 0)
    assert any(s.vector_rank for s in Article.objects.suggest("in", k=10))
    monkeypatch.setattr(suggest_module, "MIN_CHARS", 5)
    assert Article.objects.suggest("info") == []


def test_a_suggestion(rows):
    [first] = Article.objects.suggest("happy ca", k=1)
    assert isinstance(first, Suggestion)
    assert (first.pk, first.label, first.url) == (rows[2].pk, "Happy cats", None)
    assert first.object == rows[2] and first.object.title == "Happy cats"
    assert "embedding" in first.object.get_deferred_fields()  # the vector is not loaded


def test_filters_apply_and_the_function_takes_a_queryset(rows):
    info = rows[0]
    chosen = Article.objects.exclude(pk=info.pk)
    assert info.pk not in [s.pk for s in chosen.suggest("information retr", k=10)]
    assert [s.pk for s in suggest(chosen, "informal", k=1)] == [rows[1].pk]


def test_a_model_without_a_keyword_column_is_suggested_from_by_meaning(db):
    note = Note.objects.create(text="zebra crossing")
    Note.objects.filter(pk=note.pk).update(
        embedding=encode_query("zeb"), embedding_version=encoder_version()
    )
    found = Note.objects.suggest("zeb")
    assert [s.pk for s in found] == [note.pk]
    assert found[0].keyword_rank is None and found[0].label == str(note)


def test_bad_arguments():
    with pytest.raises(TypeError):
        Article.objects.suggest(None)
    with pytest.raises(ValueError, match="NUL"):
        Article.objects.suggest("a\x00b")
    with pytest.raises(ValueError, match="at least 1"):
        Article.objects.suggest("abc", k=0)


def test_fuse_sums_ranks_and_breaks_ties_by_words_first():
    fused = fuse(keyword=[1, 2], vector=[3, 1], rrf_k=60)
    assert [pk for pk, *_ in fused] == [1, 3, 2]
    assert fused[0] == (1, pytest.approx(1 / 61 + 1 / 62), 1, 2)
    assert fused[1] == (3, pytest.approx(1 / 61), None, 1)
    tie = fuse(keyword=[5], vector=[6], rrf_k=60)
    assert [pk for pk, *_ in tie] == [5, 6]  # equal scores: the row the words found first
