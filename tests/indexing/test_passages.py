"""Indexing a field with ``passages=`` (tests.testapp.models.Report: passages of at most 24
tokens of the tiny model, 6 of overlap): the worker writes each row's passages with its
vector, an edit replaces them, an older text's passages never land over a newer text's, and
rows whose passages are missing or stale are found and swept, through a real Celery worker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from django.db import transaction

from django_sbert import indexing
from django_sbert.fields import text_hash
from django_sbert.indexing import tasks
from django_sbert.indexing.passages import encode_with_passages, field_passage_limit, split_rows
from django_sbert.indexing.rows import PendingRow
from django_sbert.indexing.writes import write_rows
from django_sbert.passages import config as passage_config
from django_sbert.serving import encode_texts, get_encoder
from tests.celery_app import app
from tests.testapp.models import Report
from tests.worker_process import Worker

QUEUE = f"sbert-test-passages-{uuid.uuid4().hex[:8]}"

ECONOMY = [
    "The central bank will raise interest rates this year.",
    "Prices rise fast and the government will cut the tax.",
    "The market was falling and people want money.",
    "A new law on the economy is in the court.",
]
POLITICS = [
    "The president and the minister lost the vote.",
    "The party will win the election in the city.",
    "The war is over and peace is back in the country.",
]
LEISURE = [
    "A child plays guitar and the man eats food.",
    "The dog runs fast and the cat is slow.",
    "A woman is playing music in the old car.",
]


def body(*groups: list[str]) -> str:
    return " ".join(sentence for group in groups for sentence in group)


def passages(report: Report) -> list:
    return list(Report._meta.get_field("embedding").passage_model.objects.filter(row=report))


def source(report: Report) -> str:
    report.refresh_from_db()
    return f"{report.title}\n{report.body}"


def assert_indexed(report: Report) -> None:
    """Vector, hash and passages of the row's current text: the passages slice back to it and
    the row's vector is the normalized mean of their vectors."""
    text = source(report)
    rows = passages(report)
    assert report.embedding is not None and report.embedding_hash == text_hash(text)
    assert [p.ordinal for p in rows] == list(range(len(rows))) and rows
    for p in rows:
        assert text[p.start : p.end] == p.text
    vectors = np.asarray([p.vector for p in rows], dtype=np.float32)
    mean = vectors.mean(axis=0)
    np.testing.assert_allclose(report.embedding, mean / np.linalg.norm(mean), atol=1e-5)
    # Each passage vector is the encoder's vector of the passage text (document prompt).
    np.testing.assert_allclose(
        vectors, encode_texts([p.text for p in rows], role="document"), atol=1e-5
    )


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.05)


@pytest.fixture
def ref():
    return indexing.get_ref("testapp.Report", "embedding")


@pytest.fixture
def worker(settings, tmp_path) -> Iterator[Worker]:
    """A real worker on this module's queue; stopped (and the queue emptied) afterwards."""
    settings.SBERT = {**settings.SBERT, "QUEUE": QUEUE}
    started = Worker(tmp_path / "worker.log", QUEUE)
    yield started
    started.stop()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


# -- through a real worker --------------------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_the_worker_writes_each_saved_rows_passages_and_an_edit_replaces_them(worker, ref):
    with transaction.atomic():
        long = Report.objects.create(title="Economy", body=body(ECONOMY, POLITICS, LEISURE))
        short = Report.objects.create(title="Dogs", body="The dog runs fast.")
    wait_until(lambda: indexing.count_stale(ref) == 0, 60, "the worker embedded both rows")
    for report in (long, short):
        assert_indexed(report)
    assert len(passages(long)) > 3 and len(passages(short)) == 1
    first = {p.pk for p in passages(long)}

    long.body = body(LEISURE)
    long.save()
    wait_until(
        lambda: Report.objects.get(pk=long.pk).embedding_hash == text_hash(source(long)),
        60,
        "the worker embedded the edit",
    )
    assert_indexed(long)
    assert not first & {p.pk for p in passages(long)}, "the old text's passages are gone"
    assert all("bank" not in p.text for p in passages(long))

    pk = long.pk
    long.delete()
    model = Report._meta.get_field("embedding").passage_model
    assert not model.objects.filter(row_id=pk).exists(), "deleted with their row"
    assert model.objects.filter(row=short).count() == 1


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_rows_whose_passages_are_missing_or_stale_are_swept(worker, ref, embed):
    """Rows with a vector but no passages (vector written by other means, or before the field
    had passages) and rows changed by queryset.update() are stale; the sweep sends them and the
    worker indexes them."""
    rows = Report.objects.bulk_create(
        Report(title=f"report {i}", body=body(ECONOMY, LEISURE)) for i in range(4)
    )  # no signals: nothing sent
    embed(*rows[:2])  # a current vector and hash, no passages
    assert indexing.count_stale(ref) == 4
    assert set(indexing.stale_queryset(ref).values_list("pk", flat=True)) == {r.pk for r in rows}
    tasks.sweep.apply().get()
    wait_until(lambda: indexing.count_stale(ref) == 0, 60, "the sweep's tasks finished")
    for report in rows:
        assert_indexed(report)

    Report.objects.filter(pk=rows[0].pk).update(body=body(POLITICS))  # no signal
    assert list(indexing.stale_queryset(ref).values_list("pk", flat=True)) == [rows[0].pk]
    sent = tasks.sweep.apply().get()
    assert sent["testapp.Report.embedding"] == 1
    wait_until(lambda: indexing.count_stale(ref) == 0, 60, "the sweep re-embedded the row")
    assert_indexed(rows[0])
    assert all("bank" not in p.text for p in passages(rows[0]))


# -- the write path, in this process ----------------------------------------------------------


@pytest.mark.django_db
def test_an_older_texts_passages_never_land_over_a_newer_text(ref):
    report = Report.objects.create(title="Old", body=body(ECONOMY))
    indexing.embed_pks(ref, [report.pk])
    before = [(p.pk, p.text) for p in passages(report)]
    old_text = source(report)
    pending = [PendingRow(report.pk, old_text, text_hash(old_text))]
    vectors, row_passages = encode_with_passages(ref, pending)  # encoded, then ...
    Report.objects.filter(pk=report.pk).update(body=body(LEISURE))  # ... the row changes
    outcome = write_rows(ref, pending, vectors, passages=row_passages)
    assert outcome.written == 0
    assert [(p.pk, p.text) for p in passages(report)] == before  # untouched
    assert indexing.embed_pks(ref, [report.pk]).embedded == 1
    assert_indexed(report)


@pytest.mark.django_db
def test_a_row_whose_passage_vector_is_refused_is_skipped_alone(ref):
    good, bad = (Report.objects.create(title=t, body=body(ECONOMY)) for t in ("good", "bad"))
    texts = [source(good), source(bad)]
    pending = [PendingRow(r.pk, t, text_hash(t)) for r, t in zip((good, bad), texts, strict=True)]
    vectors, row_passages = encode_with_passages(ref, pending)
    row_passages[1].vectors[0, 0] = np.nan  # the database refuses NaN in a vector
    outcome = write_rows(ref, pending, vectors, passages=row_passages)
    assert (outcome.written, outcome.skipped) == (1, 1)
    assert passages(good) and not passages(bad)
    bad.refresh_from_db()
    assert bad.embedding is None, "the row's vector went back with its passages"


@pytest.mark.django_db
def test_splitting_follows_the_field_settings(ref, settings, monkeypatch):
    text = source(Report.objects.create(title="T", body=body(ECONOMY, POLITICS, LEISURE)))
    (split,) = split_rows(ref, [text])
    assert len(split) > 3
    model = get_encoder(ref.encoder_name)
    for passage in split:
        assert len(model.tokenizer.token_spans([passage.text])[0]) <= 24
    monkeypatch.setattr(passage_config, "MAX_CHUNKS", 1)
    # max_passages: as many passages as hold one 64-token window of text, 18 new tokens each
    assert field_passage_limit(ref) == 4
    (capped,) = split_rows(ref, [text])
    assert len(capped) == 4 and [p.text for p in capped] == [p.text for p in split[:4]]


@pytest.mark.django_db
def test_document_first_keeps_the_first_passage_vector(ref, monkeypatch):
    config = ref.field.passage_config
    monkeypatch.setattr(config, "document", "first")
    report = Report.objects.create(title="First", body=body(POLITICS, ECONOMY))
    indexing.embed_pks(ref, [report.pk])
    report.refresh_from_db()
    np.testing.assert_allclose(report.embedding, passages(report)[0].vector, atol=1e-6)
