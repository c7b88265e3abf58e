"""Versions, training runs, promotion and rollback, with the tiny model on real PostgreSQL.

Task logic runs in this process (``execute_run`` / ``run_promotion``: what the Celery tasks
call); delivery through a real worker is in test_training_worker.py.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from django_sbert import indexing, serving
from django_sbert.exceptions import RunConflict
from django_sbert.fields import text_hash
from django_sbert.finetuning import promotion, runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import (
    EncoderVersion,
    RunStatus,
    StagedEmbedding,
    TrainingPair,
    TrainingRun,
    VersionStatus,
)
from tests.finetuning.topics import NEWS
from tests.testapp.models import Article

pytestmark = pytest.mark.django_db

TOPICS = NEWS


def make_pairs(copies: int = 4) -> list[TrainingPair]:
    pairs = []
    for n in range(copies):
        for a, b in TOPICS:
            pairs.append(TrainingPair(text_a=f"{a} {n}", text_b=f"{b} {n}", split="train"))
    for a, b in TOPICS:
        pairs.append(TrainingPair(text_a=a, text_b=b, split="eval", source="eval"))
    return TrainingPair.objects.bulk_create(pairs)


def train(pairs, **hyper) -> TrainingRun:
    params = Hyperparameters(
        loss="mnrl", learning_rate=hyper.pop("learning_rate", 5e-3), batch_size=8, **hyper
    )
    run = runs.create_run("default", [p.pk for p in pairs], hyperparameters=params, enqueue=False)
    execute_run(run.pk)
    run.refresh_from_db()
    return run


def articles(n: int = 12) -> list[Article]:
    rows = Article.objects.bulk_create(
        Article(title=TOPICS[i % len(TOPICS)][0], body=f"story {i}") for i in range(n)
    )
    ref = indexing.get_ref("testapp.Article", "embedding")
    indexing.embed_stale(ref)
    return rows


def stored(article: Article) -> np.ndarray:
    return np.asarray(Article.objects.get(pk=article.pk).embedding)


def test_run_trains_a_candidate_with_metrics_and_keeps_serving(model_dir):
    pairs = make_pairs()
    base = serving.encoder_version("default")
    run = train(pairs)
    assert run.status == RunStatus.SUCCEEDED, run.error
    # Early stopping (the default) may end the run before the steps it planned.
    assert 0 < run.step == len(run.loss_history) <= run.total_steps
    assert run.evaluations["steps"] == run.step
    assert (
        {"ndcg@10", "recall@10"}
        <= set(run.metrics_before)
        <= set(run.metrics_after) | {"eval_pairs"}
    )
    candidate = run.candidate
    assert candidate.status == VersionStatus.CANDIDATE and candidate.parent == base
    assert candidate.metrics == run.metrics_after
    saved = serving.resolve_directory(candidate.directory)
    assert (saved / "modules.json").exists()
    assert not list(saved.parent.glob(".tmp-*")), "no temporary directory is left behind"
    # nothing changed what serves
    serving.forget_serving()
    assert serving.encoder_version("default") == base


def test_bad_hyperparameters_are_refused_before_queuing(model_dir):
    pairs = make_pairs(1)
    with pytest.raises(ValidationError) as info:
        runs.create_run(
            "default",
            [p.pk for p in pairs],
            hyperparameters=Hyperparameters(loss="mnrl", epochs=0, learning_rate=5.0, batch_size=1),
        )
    text = " ".join(info.value.messages)
    assert "epochs" in text and "learning_rate" in text and "batch_size" in text
    with pytest.raises(ValidationError, match="trains on pairs with a score"):
        runs.create_run(
            "default",
            [p.pk for p in pairs],
            hyperparameters=Hyperparameters(loss="cosent"),
        )
    assert not TrainingRun.objects.exists()


def test_one_run_per_encoder_at_a_time(model_dir):
    pairs = make_pairs(1)
    params = Hyperparameters(loss="mnrl", batch_size=8)
    ids = [p.pk for p in pairs]
    runs.create_run("default", ids, hyperparameters=params, enqueue=False)
    with pytest.raises(RunConflict, match="already queued or running"):
        runs.create_run("default", ids, hyperparameters=params, enqueue=False)


def test_a_run_that_fails_in_the_worker_records_the_error_and_keeps_serving(model_dir):
    """Its pairs were deleted between queuing and running: the worker fails it cleanly.
    (A worker killed in the middle of training is in test_training_worker.py.)"""
    pairs = make_pairs()
    run = runs.create_run(
        "default",
        [p.pk for p in pairs],
        hyperparameters=Hyperparameters(loss="mnrl", batch_size=8),
        enqueue=False,
    )
    TrainingPair.objects.all().delete()
    assert execute_run(run.pk) == RunStatus.FAILED
    run.refresh_from_db()
    assert "ValidationError" in run.error
    assert not EncoderVersion.objects.exists()
    assert serving.serving_record("default", max_age=0).is_base


def test_cancelled_run_leaves_no_version(model_dir):
    pairs = make_pairs()
    run = runs.create_run(
        "default",
        [p.pk for p in pairs],
        hyperparameters=Hyperparameters(loss="mnrl", batch_size=8),
        enqueue=False,
    )
    assert runs.cancel_run(run)
    assert execute_run(run.pk) == RunStatus.CANCELLED  # never starts
    assert not EncoderVersion.objects.exists()


@pytest.mark.heavy
def test_promotion_switches_every_row_at_once_and_rollback_restores(model_dir):
    rows = articles()
    base = serving.encoder_version("default")
    old_vectors = {a.pk: stored(a) for a in rows}
    run = train(make_pairs())
    candidate = run.candidate

    promotion.start_promotion(candidate, force=True, run_now=True)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.ACTIVE
    assert candidate.staged_rows == candidate.total_rows == len(rows)
    assert candidate.replaced == base
    serving.forget_serving()
    assert serving.encoder_version("default") == candidate.version

    # every row holds the candidate's vector of its own text, labelled with its version
    tuned = serving.get_encoder("default", candidate.version)
    for row in Article.objects.all():
        assert row.embedding_version == candidate.version
        expected = tuned.encode([f"{row.title}\n{row.body}"], normalize=True)[0]
        np.testing.assert_allclose(np.asarray(row.embedding), expected, atol=1e-5)
    ref = indexing.get_ref("testapp.Article", "embedding")
    assert not indexing.stale_queryset(ref).exists()
    # the old vectors are kept for rollback; the candidate's staged copies are gone
    assert set(StagedEmbedding.objects.values_list("version", flat=True)) == {base}

    # rollback: the same switch backwards, with nothing to re-encode
    previous = promotion.rollback_target(candidate)
    assert previous.is_base and previous.version == base
    promotion.start_promotion(previous, gate=False, run_now=True)
    serving.forget_serving()
    assert serving.encoder_version("default") == base
    for a in rows:
        np.testing.assert_allclose(stored(a), old_vectors[a.pk], atol=1e-6)
    assert not indexing.stale_queryset(ref).exists()


@pytest.mark.heavy
def test_rows_saved_during_a_promotion_are_staged_for_both_versions(model_dir):
    articles(4)
    candidate = train(make_pairs()).candidate
    EncoderVersion.objects.filter(pk=candidate.pk).update(status=VersionStatus.PROMOTING)
    new = Article.objects.create(title="saved while promoting", body="fresh text")
    ref = indexing.get_ref("testapp.Article", "embedding")
    indexing.embed_pks(ref, [new.pk])
    new.refresh_from_db()
    assert new.embedding_version == serving.base_version("default")  # live: still the old
    staged = StagedEmbedding.objects.get(object_pk=str(new.pk), version=candidate.version)
    assert staged.text_hash == text_hash("saved while promoting\nfresh text")
    # the promotion finishes: the row written meanwhile is not encoded again
    assert indexing.unstaged(ref, [new.pk], candidate.version) == []
    promotion.run_promotion(candidate.pk)
    new.refresh_from_db()
    assert new.embedding_version == candidate.version


@pytest.mark.heavy
def test_a_write_encoded_with_a_version_that_stopped_serving_is_redone(model_dir):
    rows = articles(3)
    candidate = train(make_pairs()).candidate
    base = serving.encoder_version("default")
    promotion.start_promotion(candidate, force=True, run_now=True)
    ref = indexing.get_ref("testapp.Article", "embedding")
    pending, _ = indexing.read_pending(ref, [rows[0].pk], force=True, version=base)
    vectors = indexing.encode_rows(ref, pending, version=base)
    with pytest.raises(indexing.VersionChanged):
        indexing.write_vectors(ref, pending, vectors, base)
    assert Article.objects.get(pk=rows[0].pk).embedding_version == candidate.version


@pytest.mark.heavy
def test_gate_refuses_a_worse_candidate_with_the_numbers(model_dir):
    candidate = train(make_pairs()).candidate
    worse = {
        **candidate.run.metrics_before,
        "ndcg@10": candidate.run.metrics_before["ndcg@10"] - 0.5,
    }
    EncoderVersion.objects.filter(pk=candidate.pk).update(metrics=worse)
    candidate.refresh_from_db()
    with pytest.raises(promotion.PromotionRefused, match=r"ndcg@10: candidate .* vs active"):
        promotion.start_promotion(candidate, run_now=True)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    promotion.start_promotion(candidate, force=True, run_now=True)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.ACTIVE


@pytest.mark.heavy
def test_similar_to_ranks_with_the_promoted_vectors(model_dir):
    articles(8)
    candidate = train(make_pairs()).candidate
    promotion.start_promotion(candidate, force=True, run_now=True)
    serving.forget_serving()
    query = TOPICS[0][0]
    vector, version = serving.query_vector(query)
    assert version == candidate.version
    tuned = serving.get_encoder("default", candidate.version)
    np.testing.assert_allclose(vector, tuned.encode([query], normalize=True)[0], atol=1e-6)
    results = list(Article.objects.similar_to(query).defer(None))
    sims = [float(np.dot(vector, np.asarray(r.embedding))) for r in results]
    assert sims == pytest.approx(sorted(sims, reverse=True), abs=1e-5)
    assert results[0].title == query


@pytest.mark.heavy
def test_processes_pick_up_a_promotion_without_restart(model_dir, settings):
    """Another process switches versions (here: the rows change under this process's cache)."""
    candidate = train(make_pairs()).candidate
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 1.5}
    base = serving.encoder_version("default")  # cached by this process
    EncoderVersion.objects.filter(pk=candidate.pk).update(status=VersionStatus.ACTIVE)
    assert serving.encoder_version("default") == base  # trusted for VERSION_CACHE_SECONDS
    time.sleep(1.6)
    assert serving.encoder_version("default") == candidate.version
    assert serving.get_encoder("default") is serving.get_encoder("default", candidate.version)
    assert serving.get_encoder("default") is not serving.get_encoder("default", base)
    assert serving.serving_changed("default", base) == candidate.version
    assert serving.serving_changed("default", candidate.version) is None


def test_while_a_version_is_promoted_the_serving_version_is_not_cached(model_dir, settings):
    first, second = (train(make_pairs(n)).candidate for n in (3, 4))
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 60}
    EncoderVersion.objects.filter(pk=first.pk).update(status=VersionStatus.PROMOTING)
    base = serving.encoder_version("default")
    # the switch commits in another process: seen at the next use, not in 60 s
    EncoderVersion.objects.filter(pk=first.pk).update(status=VersionStatus.ACTIVE)
    assert serving.encoder_version("default") == first.version != base
    # no promotion under way: cached again
    EncoderVersion.objects.filter(pk=first.pk).update(status=VersionStatus.RETIRED)
    EncoderVersion.objects.filter(pk=second.pk).update(status=VersionStatus.ACTIVE)
    assert serving.encoder_version("default") == first.version


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_readers_see_the_old_version_until_the_switch_commits(model_dir):
    """Hold the switch just before it retires the active version (its row is locked here):
    the live rows are already rewritten inside the switch's transaction, yet every reader
    still sees the old vectors, labelled with the old version, and the old serving version."""
    import threading

    from django.db import connections, transaction

    rows = articles(4)
    candidate = train(make_pairs()).candidate
    promotion.start_promotion(candidate, force=True, run_now=True)
    active = {a.pk: stored(a) for a in rows}
    base_row = promotion.rollback_target(EncoderVersion.objects.get(pk=candidate.pk))
    promotion.start_promotion(base_row, gate=False)  # marked promoting; staged by run below
    promotion.stage_field(indexing.get_ref("testapp.Article", "embedding"), base_row.version)
    errors: list[BaseException] = []

    def switch() -> None:
        try:
            promotion.switch(EncoderVersion.objects.get(pk=base_row.pk))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    with transaction.atomic():
        EncoderVersion.objects.select_for_update().get(pk=candidate.pk)
        thread = threading.Thread(target=switch)
        thread.start()
        with connection.cursor() as cursor:  # wait until the switch waits for our lock
            for _ in range(600):
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted"  # live, not a snapshot
                )
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"the switch never reached the version update: {errors}")
        assert set(Article.objects.values_list("embedding_version", flat=True)) == {
            candidate.version
        }
        for a in rows:
            np.testing.assert_allclose(stored(a), active[a.pk], atol=1e-6)
        assert serving.serving_record("default", max_age=0).version == candidate.version
    thread.join(60)
    assert not errors, errors
    assert set(Article.objects.values_list("embedding_version", flat=True)) == {base_row.version}
    assert serving.serving_record("default", max_age=0).version == base_row.version


@pytest.mark.heavy
def test_an_interrupted_promotion_resumes_where_it_stopped(model_dir):
    rows = articles(12)
    candidate = train(make_pairs()).candidate
    promotion.start_promotion(candidate, force=True, gate=False, run_now=False)
    ref = indexing.get_ref("testapp.Article", "embedding")

    class Killed(Exception):
        pass

    def die_after_first_chunk(n: int) -> None:
        raise Killed

    with pytest.raises(Killed):
        promotion.stage_field(ref, candidate.version, chunk_rows=5, progress=die_after_first_chunk)
    assert StagedEmbedding.objects.filter(version=candidate.version).count() == 5
    # one row is edited meanwhile: its staged vector is of the old text, so it is redone
    Article.objects.filter(pk=rows[0].pk).update(body="edited during the promotion")
    assert promotion.stage_field(ref, candidate.version, chunk_rows=5) == 12 - 5 + 1
    assert promotion.stage_field(ref, candidate.version) == 0  # nothing left to encode
    promotion.run_promotion(candidate.pk)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.ACTIVE
    edited = Article.objects.get(pk=rows[0].pk)
    assert edited.embedding_version == candidate.version
    assert edited.embedding_hash == text_hash(f"{edited.title}\nedited during the promotion")


def test_a_failed_promotion_records_its_error_and_changes_nothing(model_dir):
    import shutil

    articles(3)
    candidate = train(make_pairs()).candidate
    base = serving.encoder_version("default")
    shutil.rmtree(serving.resolve_directory(candidate.directory))  # its model is gone
    promotion.start_promotion(candidate, force=True)
    with pytest.raises(Exception):  # noqa: B017 - whatever loading a missing model raises
        promotion.run_promotion(candidate.pk)
    candidate.refresh_from_db()
    # Given back with the error: a candidate again, not promoting for ever.
    assert candidate.status == VersionStatus.CANDIDATE and candidate.promotion_error
    assert serving.serving_record("default", max_age=0).version == base
    assert set(Article.objects.values_list("embedding_version", flat=True)) == {base}


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_running_run_stops_it_within_a_step(model_dir, settings, monkeypatch):
    import threading

    from django.db import connections

    from django_sbert.finetuning import progress

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.1)
    run = runs.create_run(
        "default",
        [p.pk for p in make_pairs(8)],
        hyperparameters=Hyperparameters(loss="mnrl", batch_size=4, epochs=100),
        enqueue=False,
    )
    result: list[str] = []

    def work() -> None:
        try:
            result.append(execute_run(run.pk))
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    thread.start()
    deadline = time.monotonic() + 60
    while TrainingRun.objects.get(pk=run.pk).step == 0:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    assert runs.cancel_run(run)
    thread.join(60)
    run.refresh_from_db()
    assert result == [RunStatus.CANCELLED] and run.status == RunStatus.CANCELLED
    assert 0 < run.step < run.total_steps
    assert not EncoderVersion.objects.exists()
    assert not (serving.model_root() / "default").exists() or not any(
        (serving.model_root() / "default").iterdir()
    )
