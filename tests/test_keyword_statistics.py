"""Keyword statistics on real PostgreSQL: the statistics target of keyword columns, set after
``migrate`` (apps.set_keyword_statistics), and what ANALYZE keeps for ts_rank's word weights;
BM25's exact counts kept by triggers (keyword/statistics.py), equal to a recount after every
kind of write."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_sbert import apps
from django_sbert.apps import set_keyword_statistics
from django_sbert.keyword import statistics
from django_sbert.keyword.tsquery import clear_statistics_cache, column_statistics
from tests.finetuning.test_passage_promotion import model_dir, tuned  # noqa: F401 (fixtures)
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


@contextmanager
def statistics_target_of_migrate(value: int | None) -> Iterator[None]:
    """``apps.KEYWORD_STATISTICS``, the target migrate gives keyword columns, set to ``value``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(apps, "KEYWORD_STATISTICS", value)
        yield


@pytest.mark.django_db
def test_migrate_gave_the_keyword_column_its_statistics_target():
    assert statistics_target() == 1000  # the test database was migrated: post_migrate ran
    assert set_keyword_statistics(using="default") == []  # nothing left to change


@pytest.mark.django_db
def test_a_changed_setting_is_applied_and_none_leaves_the_column_alone():
    with statistics_target_of_migrate(250):
        assert (TABLE, COLUMN) in set_keyword_statistics(using="default")
        assert statistics_target() == 250
    with statistics_target_of_migrate(None):
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

    with statistics_target_of_migrate(100):
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
        with statistics_target_of_migrate(300):
            assert set_keyword_statistics(using="default") == []
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
    assert "could not set the statistics target of testapp_article.embedding_tsv" in caplog.text
    assert statistics_target() == 1000  # unchanged, and the connection still works


# -- BM25's statistics (keyword/statistics.py): kept by triggers, equal to a recount ----------

LETTERS = ["A", "B"]  # Article's source fields: title (A), body (B)


def assert_counts_exact() -> dict[str, int]:
    """The statistics tables hold what a recount from the rows gives; the totals."""
    totals, dfs = statistics.stored(connection, TABLE, COLUMN)
    expected_totals, expected_dfs = statistics.recount(connection, TABLE, COLUMN, LETTERS)
    assert dfs == expected_dfs
    assert {k: v for k, v in totals.items() if k in expected_totals} == expected_totals
    return totals


@pytest.mark.django_db(transaction=True)
def test_statistics_equal_a_recount_through_every_kind_of_write():
    Article.objects.all().delete()
    assert assert_counts_exact()["*"] == 0
    one = Article.objects.create(title="Cats and dogs", body="A cat plays with a dog.")
    Article.objects.create(title="Interest rates", body="The bank raises rates. Rates rise.")
    assert_counts_exact()
    Article.objects.bulk_create(
        Article(title=f"Market {i}", body=f"Prices fall {'fast ' * i}today") for i in range(50)
    )
    assert assert_counts_exact()["*"] == 52
    one.body = "A bird sings; no cat here."  # save(): an UPDATE of every column
    one.save()
    assert_counts_exact()
    one.save()  # the same text again: nothing moves
    assert_counts_exact()
    Article.objects.filter(title__startswith="Market 1").update(body="Bonds and shares")
    assert_counts_exact()
    Article.objects.filter(title__startswith="Market 2").update(category="other")  # no text
    assert_counts_exact()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (title, body, category, published) "
            "VALUES ('Raw SQL', 'Written without Django', '', true)"
        )
        cursor.execute(f"UPDATE {TABLE} SET title = 'Raw title' WHERE title = 'Raw SQL'")
    assert_counts_exact()
    Article.objects.filter(title__startswith="Market 3").delete()
    one.delete()
    assert_counts_exact()
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {TABLE} CASCADE")
    assert assert_counts_exact()["*"] == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("model_dir")
def test_statistics_equal_a_recount_after_a_bulk_load_and_a_promotion(request):
    from django_sbert import indexing
    from django_sbert.finetuning import promotion
    from django_sbert.serving import encode_texts
    from tests.finetuning.test_passage_promotion import candidate

    Article.objects.all().delete()
    objs = [Article(title=f"Loaded {i}", body=f"The dog runs {i} times") for i in range(20)]
    field = Article._meta.get_field("embedding")
    indexing.bulk_load(objs, encode_texts([field.get_source_text(obj) for obj in objs]))
    Article.objects.bulk_create(Article(title="Later", body="A cat") for _ in range(5))
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    before = assert_counts_exact()
    target = candidate(request.getfixturevalue("tuned"))
    promotion.start_promotion(target, gate=False, run_now=True)
    assert Article.objects.exclude(embedding_version=target.version).count() == 0  # re-embedded
    assert assert_counts_exact() == before  # the vectors moved, the words did not
    Article.objects.all().delete()


@pytest.mark.django_db
def test_an_update_that_leaves_the_text_alone_queues_no_trigger():
    obj = Article.objects.create(title="Quiet", body="Nothing changes")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname LIKE %s",
            [TABLE, "sbert_kw_%"],
        )
        assert cursor.fetchone()[0] == 4
        # The row-level UPDATE trigger has a column list and a WHEN: an update of the vector
        # columns alone, as the embedding writes do, does not fire it.
        cursor.execute("SELECT pg_stat_get_xact_function_calls(%s::regproc)", [update_fn()])
        before = cursor.fetchone()[0] or 0
        Article.objects.filter(pk=obj.pk).update(category="x", published=False)
        obj.save()
        cursor.execute("SELECT pg_stat_get_xact_function_calls(%s::regproc)", [update_fn()])
        assert (cursor.fetchone()[0] or 0) == before


def update_fn() -> str:
    return statistics._names(TABLE, COLUMN)["update"]


@pytest.mark.django_db
def test_rebuild_counts_from_scratch():
    Article.objects.bulk_create(Article(title="Gone", body="astray") for _ in range(3))
    with connection.cursor() as cursor:  # statistics damaged by hand
        cursor.execute("UPDATE django_sbert_keyword_lexeme SET df = df + 7")
        cursor.execute("DELETE FROM django_sbert_keyword_total WHERE weight = 'B'")
    with pytest.raises(CommandError, match="differ from a recount"):
        call_command("sbert_keyword_stats", "--check", stdout=io.StringIO())
    assert f"{TABLE}.{COLUMN}" in statistics.rebuild()
    assert_counts_exact()
    Article.objects.filter(title="Gone").update(body="lost")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE django_sbert_keyword_lexeme SET df = df + 1")
    call_command("sbert_keyword_stats", "--rebuild", stdout=io.StringIO())
    assert_counts_exact()
    call_command("sbert_keyword_stats", "--check", stdout=io.StringIO())


@pytest.mark.django_db
def test_a_role_with_no_grant_on_the_statistics_tables_can_still_write_rows():
    # The triggers' functions run with migrate's rights (SECURITY DEFINER): a role allowed to
    # write the site's table only still gets its rows counted.
    with connection.cursor() as cursor:
        cursor.execute("CREATE ROLE sbert_test_writer NOLOGIN")  # rolled back with the test
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {TABLE} TO sbert_test_writer")
        cursor.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO sbert_test_writer")
        cursor.execute("SET LOCAL ROLE sbert_test_writer")
        try:
            cursor.execute(
                f"INSERT INTO {TABLE} (title, body, category, published) "
                "VALUES ('Granted', 'only the table', '', true)"
            )
            cursor.execute(f"UPDATE {TABLE} SET body = 'changed text' WHERE title = 'Granted'")
            cursor.execute(f"DELETE FROM {TABLE} WHERE title = 'Granted' AND false")
        finally:
            cursor.execute("RESET ROLE")
    totals = assert_counts_exact()
    assert totals["*"] == Article.objects.count() == 1
