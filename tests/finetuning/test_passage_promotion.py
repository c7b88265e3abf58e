"""Promoting a version of an encoder that a field with ``passages=`` uses: the passages are
staged with their rows (``StagedPassage`` beside ``StagedEmbedding``) and switched with them in
the switch's one transaction, so no reader ever sees a row with passages of another version
than its vector; rollback restores them without encoding anything.

Task logic runs in this process (``run_promotion``: what the Celery task calls), with a real
second version: the tiny model with its weights moved, saved as a training run saves one.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings as django_settings
from django.db import connection, connections, transaction

from django_sbert import indexing, serving
from django_sbert.finetuning import promotion
from django_sbert.models import EncoderVersion, StagedEmbedding, StagedPassage, VersionStatus
from tests.testapp.models import Report
from tests.tiny_model import moved_tiny_encoder

SENTENCES = [
    "The central bank will raise interest rates this year.",
    "The president and the minister lost the vote.",
    "A child plays guitar and the man eats food.",
    "The dog runs fast and the cat is slow.",
    "The war is over and peace is back in the country.",
]
TEXT = "the dog runs fast"


@pytest.fixture(scope="module")
def tuned():
    """A second version of the serving model: the tiny model with its weights moved."""
    return moved_tiny_encoder(django_settings.TINY_MODEL_DIR, seed=7)


@pytest.fixture
def model_dir(settings, tmp_path) -> Path:
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_DIR": str(tmp_path / "models"),
        "VERSION_CACHE_SECONDS": 0.2,
    }
    serving.forget_serving()
    yield tmp_path / "models"
    serving.forget_serving()


@pytest.fixture
def ref():
    return indexing.get_ref("testapp.Report", "embedding")


def reports(n: int = 6) -> list[Report]:
    rows = Report.objects.bulk_create(
        Report(title=f"report {i}", body=" ".join(SENTENCES[i % 5 :] + SENTENCES[: i % 5]))
        for i in range(n)
    )
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))
    return rows


def candidate(tuned) -> EncoderVersion:
    directory, version = serving.save_encoder(tuned, "default", serving.base_label("default"))
    return EncoderVersion.objects.create(
        encoder_name="default",
        version=version,
        directory=directory,
        parent=serving.base_version("default"),
    )


def live_passages() -> dict[tuple[int, int], tuple[int, int, str, np.ndarray]]:
    model = Report._meta.get_field("embedding").passage_model
    return {
        (p.row_id, p.ordinal): (p.start, p.end, p.text, np.asarray(p.vector))
        for p in model.objects.all()
    }


def check_version(version: str) -> None:
    """Every row carries ``version``, and its passages are that version's vectors of their
    texts, the row's own vector their normalized mean."""
    encoder = serving.get_encoder("default", version)
    passages = live_passages()
    assert passages
    for row in Report.objects.all():
        assert row.embedding_version == version
        mine = [passages[key] for key in sorted(passages) if key[0] == row.pk]
        texts = [text for _, _, text, _ in mine]
        vectors = np.stack([vector for *_, vector in mine])
        np.testing.assert_allclose(vectors, encoder.encode(texts, normalize=True), atol=1e-5)
        mean = vectors.mean(axis=0)
        np.testing.assert_allclose(row.embedding, mean / np.linalg.norm(mean), atol=1e-5)


def check_search(version: str) -> None:
    query = serving.encode_query(TEXT, "default", version)
    passages = live_passages()
    rows = list(Report.objects.similar_to(TEXT, k=3))
    assert len(rows) == 3
    for row in rows:
        best = max(float(np.dot(query, v)) for (pk, _), (*_, v) in passages.items() if pk == row.pk)
        assert row.embedding_version == version
        assert row.similarity == pytest.approx(best, abs=1e-5)


@pytest.mark.django_db
def test_promotion_switches_passages_with_their_rows_and_rollback_restores_them(
    model_dir, tuned, ref
):
    rows = reports()
    base = serving.encoder_version("default")
    before = live_passages()
    check_version(base)
    target = candidate(tuned)

    EncoderVersion.objects.filter(pk=target.pk).update(status=VersionStatus.PROMOTING)
    promotion.stage_field(ref, target.version)
    # Staged beside the live ones: the live passages did not move.
    assert live_passages().keys() == before.keys()
    for key, (*_, vector) in live_passages().items():
        np.testing.assert_allclose(vector, before[key][3], atol=1e-6)
    staged = StagedPassage.objects.filter(version=target.version)
    assert staged.count() == len(before)
    assert set(staged.values_list("object_pk", flat=True)) == {str(r.pk) for r in rows}

    promotion.switch(EncoderVersion.objects.get(pk=target.pk))
    serving.forget_serving()
    assert serving.encoder_version("default") == target.version
    check_version(target.version)
    # Same texts and offsets (same tokenizer), new vectors.
    after = live_passages()
    assert {k: v[:3] for k, v in after.items()} == {k: v[:3] for k, v in before.items()}
    assert not indexing.stale_queryset(ref).exists()
    check_search(target.version)
    # The old passages are kept for rollback, with the old rows; the new staged ones are gone.
    assert set(StagedPassage.objects.values_list("version", flat=True)) == {base}
    assert StagedPassage.objects.count() == len(before)
    assert set(StagedEmbedding.objects.values_list("version", flat=True)) == {base}

    previous = promotion.rollback_target(EncoderVersion.objects.get(pk=target.pk))
    assert indexing.unstaged(ref, [r.pk for r in rows], previous.version) == []  # nothing to encode
    promotion.start_promotion(previous, gate=False, run_now=True)
    serving.forget_serving()
    assert serving.encoder_version("default") == base
    restored = live_passages()
    assert restored.keys() == before.keys()
    for key, (start, end, text, vector) in restored.items():
        assert (start, end, text) == before[key][:3]
        np.testing.assert_allclose(vector, before[key][3], atol=1e-6)
    check_search(base)


@pytest.mark.django_db
def test_a_row_staged_without_its_passages_is_staged_again(model_dir, tuned, ref):
    """A vector staged before the field had passages (here: its staged passages removed) is
    not enough: the promotion encodes the row again, so it switches with passages."""
    rows = reports(3)
    target = candidate(tuned)
    promotion.stage_field(ref, target.version)
    StagedPassage.objects.filter(object_pk=str(rows[0].pk)).delete()
    assert [p.pk for p in indexing.unstaged(ref, [r.pk for r in rows], target.version)] == [
        rows[0].pk
    ]
    promotion.stage_field(ref, target.version)
    assert StagedPassage.objects.filter(object_pk=str(rows[0].pk)).exists()


@pytest.mark.django_db
def test_rows_saved_during_a_promotion_get_passages_of_both_versions(model_dir, tuned, ref):
    reports(2)
    target = candidate(tuned)
    EncoderVersion.objects.filter(pk=target.pk).update(status=VersionStatus.PROMOTING)
    new = Report.objects.create(title="saved while promoting", body=" ".join(SENTENCES))
    indexing.embed_pks(ref, [new.pk])
    new.refresh_from_db()
    assert new.embedding_version == serving.base_version("default")  # live: the old version
    live = [v for (pk, _), v in live_passages().items() if pk == new.pk]
    staged = StagedPassage.objects.filter(object_pk=str(new.pk), version=target.version)
    assert len(live) == staged.count() > 1
    assert [(s.start, s.end, s.text) for s in staged.order_by("ordinal")] == [v[:3] for v in live]
    assert indexing.unstaged(ref, [new.pk], target.version) == []


@pytest.mark.django_db(transaction=True)
def test_readers_see_old_rows_with_old_passages_until_the_switch_commits(model_dir, tuned, ref):
    """Hold a switch (here: the rollback to the base model) just before it retires the active
    version, whose row is locked here: inside the switch's transaction rows and passages are
    already rewritten, yet a reader, and a search, still see the active version's rows with
    its passages."""
    reports(4)
    target = candidate(tuned)
    promotion.start_promotion(target, gate=False, run_now=True)
    serving.forget_serving()
    active = live_passages()
    check_version(target.version)
    base_row = promotion.rollback_target(EncoderVersion.objects.get(pk=target.pk))
    promotion.start_promotion(base_row, gate=False)  # marked promoting; staged below
    promotion.stage_field(ref, base_row.version)
    errors: list[BaseException] = []

    def switch() -> None:
        try:
            promotion.switch(EncoderVersion.objects.get(pk=base_row.pk))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    with transaction.atomic():
        EncoderVersion.objects.select_for_update().get(pk=target.pk)
        thread = threading.Thread(target=switch)
        thread.start()
        with connection.cursor() as cursor:  # wait until the switch waits for our lock
            for _ in range(600):
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"the switch never reached the version update: {errors}")
        seen = live_passages()
        assert seen.keys() == active.keys()
        for key, (*_, vector) in seen.items():
            np.testing.assert_allclose(vector, active[key][3], atol=1e-6)
        check_version(target.version)
        check_search(target.version)
    thread.join(60)
    assert not errors, errors
    serving.forget_serving()
    check_version(base_row.version)
    check_search(base_row.version)


@pytest.mark.django_db
def test_a_passage_search_read_before_the_switch_runs_again_with_the_new_version(
    model_dir, tuned, ref
):
    """The search read the old version and encoded its text, the switch committed, then the
    statement ran: it finds no row of its version, notices the switch and runs once more,
    the passage scan comparing with the new version's query vector."""
    reports(6)
    target = candidate(tuned)
    EncoderVersion.objects.filter(pk=target.pk).update(status=VersionStatus.PROMOTING)
    promotion.stage_field(ref, target.version)
    search = Report.objects.similar_to(TEXT, k=4)
    hybrid = Report.objects.hybrid_search(TEXT, k=4)
    promotion.switch(EncoderVersion.objects.get(pk=target.pk))
    query = serving.encode_query(TEXT, "default", target.version)
    passages = live_passages()
    for rows in (list(search), list(hybrid)):
        assert len(rows) == 4
        for row in rows:
            best = max(
                float(np.dot(query, vector))
                for (pk, _), (*_, vector) in passages.items()
                if pk == row.pk
            )
            assert row.embedding_version == target.version
            assert row.similarity == pytest.approx(best, abs=1e-5)
            assert row.passage["text"] in f"{row.title}\n{row.body}"
    assert all(row.vector_rank is not None for row in hybrid)
