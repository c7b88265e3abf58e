"""A fusion tuned on a judgment list (evaluation/run.py, ``fusion_report``), on real PostgreSQL
with the tiny model: shown beside the settings' fusion, kept on the serving version only where
it ranked the list's held-out queries better than the fusion in use, and then used by
``hybrid_search()``; otherwise the settings' fusion stays."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from django_sbert import indexing, serving
from django_sbert.evaluation.run import evaluate
from django_sbert.finetuning.hybrid import MIN_HELD_OUT, site_fusion, split_queries
from django_sbert.models import (
    EncoderVersion,
    JudgedQuery,
    Judgment,
    JudgmentList,
    VersionStatus,
)
from tests.finetuning.test_hybrid_fusion import word
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rank_fusion")]

QUERIES = 4 * MIN_HELD_OUT
DISTRACTORS = 150


@pytest.fixture
def rows():
    """Rows only the keyword side finds for their query ("<word> notice"): a title of the
    query's made-up word and a long body of other made-up words. Distractors are shaped like
    the queries, so the tiny model's vectors rank them first. Primary keys are fixed and of
    one length, so ties go to the distractors in Python's fusion and in SQL alike."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE testapp_article CASCADE")
    distractors = Article.objects.bulk_create(
        Article(pk=100000 + j, title=f"{word(20000 + j)} notice", body="")
        for j in range(DISTRACTORS)
    )
    relevant = Article.objects.bulk_create(
        Article(
            pk=900000 + i,
            title=f"the {word(i)}",
            body=" ".join(word(10000 + 40 * i + j) for j in range(30)),
        )
        for i in range(QUERIES)
    )
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    return relevant, distractors


def graded_list(grades: list[dict[int, int]]) -> JudgmentList:
    graded = JudgmentList.objects.create(
        name="words", content_type=ContentType.objects.get_for_model(Article), field="embedding"
    )
    for i, row_grades in enumerate(grades):
        query = JudgedQuery.objects.create(judgment_list=graded, text=f"{word(i)} notice")
        Judgment.objects.bulk_create(
            Judgment(query=query, object_pk=str(pk), grade=g) for pk, g in row_grades.items()
        )
    return graded


def serving_row() -> EncoderVersion:
    """The settings' model recorded as the serving version (as after a rollback to it)."""
    return EncoderVersion.objects.create(
        encoder_name="default",
        version=serving.encoder_version("default"),
        is_base=True,
        status=VersionStatus.ACTIVE,
    )


def first_hit(i: int) -> int:
    return Article.objects.hybrid_search(f"{word(i)} notice", k=1)[0].pk


def test_a_fusion_that_wins_on_the_lists_held_out_queries_is_kept_and_serves(rows):
    relevant, _ = rows
    graded = graded_list([{row.pk: 1} for row in relevant])
    row = serving_row()
    serving.forget_serving()
    assert serving.serving_record("default", max_age=0).fusion is None
    assert first_hit(0) != relevant[0].pk  # the settings' fusion: a distractor first

    [hybrid] = evaluate(graded, modes=["hybrid"], keep_fusion=True)
    report = hybrid.metrics["fusion"]
    assert report["serving"] == "settings" and report["tuned"] is None
    assert report["settings"]["fusion"] == site_fusion()
    assert report["settings"]["ndcg@10"] == pytest.approx(hybrid.metrics["ndcg@10"], abs=1e-6)
    tried = report["list"]
    tuning, held = split_queries([str(q.pk) for q in graded.queries.all()])
    assert (tried["tuned_on"], tried["heldout_queries"]) == (len(tuning), len(held))
    assert tried["heldout_tuned_ndcg@10"] > tried["heldout_current_ndcg@10"]
    assert tried["wins"] and tried["kept"]

    # Kept on the serving version, and hybrid_search() fuses with it from now on.
    row.refresh_from_db()
    assert row.metrics["fusion_source"] == "judgments"
    kept = tried["fusion"]
    current = serving.serving_record("default", max_age=0)
    assert current.fusion_settings() == kept
    assert all(first_hit(i) == relevant[i].pk for i in range(QUERIES))
    # Measured again, the version's tuned fusion stands beside the settings'.
    [again] = evaluate(graded, modes=["hybrid"], store=False)
    report = again.metrics["fusion"]
    assert report["serving"] == "tuned" and report["tuned"]["fusion"] == kept
    assert report["tuned"]["ndcg@10"] > report["settings"]["ndcg@10"]
    assert again.metrics["ndcg@10"] == pytest.approx(report["tuned"]["ndcg@10"], abs=1e-6)


def test_a_fusion_that_wins_only_where_it_was_tuned_is_not_kept(rows):
    relevant, distractors = rows
    texts = [f"{word(i)} notice" for i in range(QUERIES)]
    graded = graded_list([{} for _ in texts])
    queries = list(graded.queries.order_by("pk"))
    _, held = split_queries([str(q.pk) for q in queries])
    # On the held-out queries the row the vectors rank first is the relevant one; on the
    # others the keywords' is: tuned there, a keyword-heavier fusion ranks the others worse.
    for i, query in enumerate(queries):
        if str(query.pk) in held:
            pk = Article.objects.similar_to(texts[i], k=1)[0].pk
        else:
            pk = relevant[i].pk
        Judgment.objects.create(query=query, object_pk=str(pk), grade=1)
    assert {pk for (pk,) in Judgment.objects.values_list("object_pk")} & {
        str(d.pk) for d in distractors
    }
    row = serving_row()
    serving.forget_serving()

    [hybrid] = evaluate(graded, modes=["hybrid"], keep_fusion=True)
    tried = hybrid.metrics["fusion"]["list"]
    assert tried["fusion"] != site_fusion()  # a different fusion won where it was tuned
    assert tried["heldout_tuned_ndcg@10"] <= tried["heldout_current_ndcg@10"]
    assert not tried["wins"] and not tried["kept"]
    row.refresh_from_db()
    assert "fusion_rrf_k" not in row.metrics
    assert serving.serving_record("default", max_age=0).fusion is None  # the settings' serve


def test_sbert_evaluate_shows_the_fusions_side_by_side(rows):
    relevant, _ = rows
    graded_list([{row.pk: 1} for row in relevant])
    out = StringIO()
    call_command("sbert_evaluate", "words", "--mode", "hybrid", "--no-store", stdout=out)
    text = out.getvalue()
    assert "hybrid fusion, nDCG@10 on the list:" in text
    assert "settings' (rrf k" in text and "(serves)" in text
    assert "against" in text and ": wins, not kept" in text  # no --keep-fusion, no row
