"""Keyword search in other languages: a text search configuration per source field
(``EmbeddingField(keyword_config={"title": "simple", "body": "german"})``), BM25 over it."""

from __future__ import annotations

import pytest
from django.db import connection, models
from django.test.utils import isolate_apps

from django_sbert.fields import EmbeddingField
from django_sbert.keyword import statistics
from django_sbert.query import SemanticManager

ROWS = [  # (title, body)
    ("Berlin", "Die alten Häuser der Stadt werden renoviert."),
    ("München", "Ein Haus am See."),
    ("Hamburg", "Der Hafen ist groß und die Schiffe sind schnell."),
]


@isolate_apps("tests.testapp")
@pytest.mark.django_db
def test_german_stemming_per_field_and_bm25_over_it():
    class Seite(models.Model):
        title = models.CharField(max_length=200)
        body = models.TextField(blank=True)
        embedding = EmbeddingField(
            source=("title", "body"),
            keyword_search=True,
            keyword_config={"title": "simple", "body": "german"},
        )

        objects = SemanticManager()

        class Meta:
            app_label = "testapp"

    with connection.schema_editor() as editor:
        editor.create_model(Seite)
    table = Seite._meta.db_table
    try:
        statistics.install(models=[Seite])
        rows = [Seite.objects.create(title=t, body=b) for t, b in ROWS]
        tsv = Seite.objects.values_list("embedding_tsv", flat=True).get(pk=rows[0].pk)
        assert "'haus':" in tsv and "'berlin':1A" in tsv  # german stems, the title as it is
        # "Hauses" is "haus" in German: both rows with a house, the shorter text first;
        # english stemming would find neither ("häuser" and "hauses" stay apart).
        found = list(Seite.objects.keyword_search("des Hauses", match="any"))
        assert found == [rows[1], rows[0]]
        assert found[0].keyword_score > found[1].keyword_score > 0
        # The title is read with 'simple' (no stemming, no stop words): "Berlin" as written.
        assert list(Seite.objects.keyword_search("berlin", match="any")) == [rows[0]]
        totals, dfs = statistics.stored(connection, table, "embedding_tsv")
        assert totals["*"] == 3 and dfs["haus"] == 2
        assert (totals, dfs) == statistics.recount(connection, table, "embedding_tsv", ["A", "B"])
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM django_sbert_keyword_total WHERE relation LIKE %s", [table + ".%"]
            )
            cursor.execute(
                "DELETE FROM django_sbert_keyword_lexeme WHERE relation LIKE %s", [table + ".%"]
            )
