"""The statistics target of keyword columns, set after ``migrate`` (apps.set_keyword_statistics):
on real PostgreSQL, what ANALYZE keeps and the word weights keyword search reads from it."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import override_settings

from django_sbert.apps import set_keyword_statistics
from django_sbert.fulltext import clear_statistics_cache, column_statistics
from tests.testapp.models import Article

TABLE, COLUMN = "testapp_article", "embedding_tsv"


def statistics_target() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(attstattarget, -1) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = %s",
            [TABLE, COLUMN],
        )
        return cursor.fetchone()[0]


def search_settings(**values) -> dict:
    return {**settings.SBERT, "SEARCH": {**settings.SBERT.get("SEARCH", {}), **values}}


@pytest.mark.django_db
def test_migrate_gave_the_keyword_column_the_settings_statistics_target():
    assert statistics_target() == 1000  # the test database was migrated: post_migrate ran
    assert set_keyword_statistics(using="default") == []  # nothing left to change


@pytest.mark.django_db
def test_a_changed_setting_is_applied_and_none_leaves_the_column_alone():
    with override_settings(SBERT=search_settings(KEYWORD_STATISTICS=250)):
        assert (TABLE, COLUMN) in set_keyword_statistics(using="default")
        assert statistics_target() == 250
    with override_settings(SBERT=search_settings(KEYWORD_STATISTICS=None)):
        assert set_keyword_statistics(using="default") == []
        assert statistics_target() == 250


@pytest.mark.django_db
def test_analyze_then_counts_the_rows_of_more_words():
    # 1,200 distinct rare words, each in one row, and one word in every row: at a target of 100
    # ANALYZE keeps 1,000 words at most, so some rare words have no count; at 1,000 all do.
    Article.objects.bulk_create(Article(title=f"common w{i:04d}x", body="") for i in range(1200))
    with connection.cursor() as cursor:  # the inserts' deferred foreign key checks, now: ALTER
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # TABLE refuses pending trigger events

    def counted() -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {TABLE}")
        clear_statistics_cache()
        freqs, _ = column_statistics(connection, TABLE, COLUMN)
        return len(freqs)

    with override_settings(SBERT=search_settings(KEYWORD_STATISTICS=100)):
        set_keyword_statistics(using="default")
        few = counted()
    set_keyword_statistics(using="default")  # back to the default, 1000
    many = counted()
    assert few <= 1000 < many
    clear_statistics_cache()


@pytest.mark.django_db
def test_a_role_that_cannot_alter_the_table_gets_a_warning_and_migrate_goes_on(caplog):
    with connection.cursor() as cursor:
        cursor.execute("CREATE ROLE sbert_test_reader NOLOGIN")  # rolled back with the test
        cursor.execute(f"GRANT SELECT ON {TABLE} TO sbert_test_reader")
        cursor.execute("SET LOCAL ROLE sbert_test_reader")
    try:
        with override_settings(SBERT=search_settings(KEYWORD_STATISTICS=300)):
            assert set_keyword_statistics(using="default") == []
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
    assert "could not set the statistics target of testapp_article.embedding_tsv" in caplog.text
    assert statistics_target() == 1000  # unchanged, and the connection still works
