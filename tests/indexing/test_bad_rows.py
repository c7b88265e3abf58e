"""One bad row never blocks indexing, and no row's text can make a task run out of memory.

Real parts only. A *source that raises*: ``testapp.Document`` builds its text from a JSON
payload, and a payload that does not parse makes ``json.loads`` raise. A *vector the database
refuses*: a copy of the tiny test model whose embedding of the token "war" is +inf, so any
text holding that word encodes to NaN, which pgvector refuses with ``DataError`` ("NaN not
allowed in vector"); every other text encodes as usual. Each bad row is logged, recorded in
``SkippedRow``, shown by ``sbert_status`` and skipped, while the rest of its chunk, its field
and the sweep go on; the sweep does not send an unchanged bad row again before its retry time.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.db import ProgrammingError, connection, transaction
from django.utils import timezone

from django_sbert import indexing
from django_sbert.fields import text_hash
from django_sbert.indexing import tasks
from django_sbert.models import SkippedRow
from django_sbert.passages import config as passage_config
from django_sbert.serving import get_encoder
from tests.celery_app import app
from tests.testapp.models import Article, Document, Product
from tests.worker_process import Worker

POISON = "war"  # a word of the tiny model's vocabulary: one token
WORDS = ["bank", "rates", "rise", "music", "food", "dog", "cat", "peace", "tax", "city"]
QUEUE = f"sbert-bad-rows-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def poisoned_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny test model with the embedding of the token "war" set to +inf."""
    from safetensors.numpy import load_file, save_file

    from tests.settings import TINY_MODEL_DIR
    from tests.tiny_model import build_vocab

    directory = tmp_path_factory.mktemp("poisoned") / "model"
    shutil.copytree(TINY_MODEL_DIR, directory)
    weights = dict(load_file(directory / "model.safetensors"))
    table = weights["embeddings.word_embeddings.weight"].copy()
    table[build_vocab().index(POISON)] = np.inf
    weights["embeddings.word_embeddings.weight"] = table
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


@pytest.fixture
def poisoned(settings, poisoned_model_dir: Path) -> Path:
    """The "default" encoder is the poisoned model (every field of the test app uses it)."""
    default = settings.SBERT["ENCODERS"]["default"]
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {"default": {**default, "MODEL": str(poisoned_model_dir)}},
    }
    return poisoned_model_dir


@pytest.fixture
def eager() -> Iterator[None]:
    """Tasks run inline when they are sent (the task logic, not delivery)."""
    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = saved


def document_ref() -> indexing.FieldRef:
    return indexing.get_ref("testapp.Document", "embedding")


def article_ref() -> indexing.FieldRef:
    return indexing.get_ref("testapp.Article", "embedding")


def payload(title: str) -> str:
    return json.dumps({"title": title})


def make_documents() -> tuple[list[Document], Document]:
    """Four documents whose text builds, and one in the middle whose source raises."""
    documents = Document.objects.bulk_create(
        [
            Document(payload=payload("bank rates rise")),
            Document(payload=payload("music and food")),
            Document(payload="{'title': not json"),
            Document(payload=payload("cat and dog")),
            Document(payload=payload("peace in the city")),
        ]
    )
    return documents, documents[2]


def make_articles() -> tuple[list[Article], Article]:
    """Three articles that encode, and one whose vector comes out NaN."""
    articles = Article.objects.bulk_create(
        [
            Article(title="bank rates rise", body="tax"),
            Article(title=f"the {POISON} ends", body="peace"),
            Article(title="music", body="food"),
            Article(title="cat", body="dog"),
        ]
    )
    return articles, articles[1]


def has_vector(obj: Article | Document | Product) -> bool:
    obj.refresh_from_db()
    return obj.embedding is not None


def run_status() -> str:
    out = StringIO()
    call_command("sbert_status", "--no-progress", stdout=out, stderr=StringIO())
    return out.getvalue()


# -- the rest of the chunk goes on -------------------------------------------------------------


@pytest.mark.django_db
def test_a_source_that_raises_costs_only_its_row(caplog):
    documents, bad = make_documents()
    with caplog.at_level(logging.WARNING, logger="django_sbert"):
        stats = indexing.embed_pks(document_ref(), [d.pk for d in documents])

    assert (stats.embedded, stats.skipped) == (4, 1)
    assert [has_vector(d) for d in documents] == [True, True, False, True, True]
    record = SkippedRow.objects.get()
    assert (record.object_pk, record.field, record.stage, record.error, record.text_hash) == (
        str(bad.pk),
        "embedding",
        "source",
        "JSONDecodeError",
        "",
    )
    assert record.failures == 1
    warning = next(r for r in caplog.records if "skipped" in r.getMessage())
    assert warning.levelno == logging.WARNING
    assert f"testapp.Document pk={bad.pk} (field 'embedding')" in warning.getMessage()
    assert "its source raised JSONDecodeError" in warning.getMessage()


@pytest.mark.django_db
def test_a_vector_the_database_refuses_costs_only_its_row(poisoned, caplog):
    articles, bad = make_articles()
    with caplog.at_level(logging.WARNING, logger="django_sbert"):
        stats = indexing.embed_pks(article_ref(), [a.pk for a in articles])

    assert (stats.embedded, stats.skipped, stats.changed) == (3, 1, 0)
    assert [has_vector(a) for a in articles] == [True, False, True, True]
    record = SkippedRow.objects.get()
    assert (record.object_pk, record.stage, record.error) == (str(bad.pk), "write", "DataError")
    assert "NaN not allowed in vector" in record.message
    assert record.text_hash == text_hash(f"{bad.title}\n{bad.body}")
    assert f"testapp.Article pk={bad.pk} (field 'embedding')" in caplog.text
    assert "the database refused its vector with DataError: NaN not allowed" in caplog.text


@pytest.mark.django_db
def test_a_row_the_database_refuses_while_a_version_is_staged_is_skipped(poisoned):
    """Staged writes (a version being promoted) isolate a refused row the same way."""
    articles, bad = make_articles()
    ref = article_ref()
    version = ref.version()
    pending = indexing.unstaged(ref, [a.pk for a in articles], version)
    assert len(pending) == 4
    assert indexing.stage_pending(ref, pending, version) == 3
    record = SkippedRow.objects.get()
    assert (record.object_pk, record.stage, record.error) == (str(bad.pk), "stage", "DataError")


@pytest.mark.django_db
def test_sbert_status_counts_and_lists_skipped_rows(poisoned):
    documents, bad_document = make_documents()
    articles, bad_article = make_articles()
    indexing.embed_pks(document_ref(), [d.pk for d in documents])
    indexing.embed_pks(article_ref(), [a.pk for a in articles])

    output = run_status()
    assert "testapp.Document.embedding: 1 row(s) skipped after errors of their own" in output
    assert f"  pk={bad_document.pk}  source  JSONDecodeError: " in output
    assert "testapp.Article.embedding: 1 row(s) skipped after errors of their own" in output
    assert f"  pk={bad_article.pk}  write  DataError: NaN not allowed in vector" in output
    table = {line.split()[0]: line.split() for line in output.splitlines() if line.strip()}
    assert table["testapp.Article.embedding"][2:6] == ["4", "3", "1", "1"]  # still stale


# -- the sweep goes on, and does not loop on a bad row ---------------------------------------


@pytest.mark.django_db
def test_the_sweep_does_not_send_an_unchanged_skipped_row_again(poisoned, eager):
    documents, bad_document = make_documents()
    articles, bad_article = make_articles()

    assert tasks.sweep.apply().get() == {
        "testapp.Article.embedding": 4,
        "testapp.Document.embedding": 5,
    }
    assert SkippedRow.objects.count() == 2
    # Both rows are still stale (sbert_status counts them), but the sweep leaves them alone.
    assert indexing.count_stale(article_ref()) == indexing.count_stale(document_ref()) == 1
    assert tasks.sweep.apply().get() == {}

    # An edit sends the row at once, and a row that then embeds loses its record.
    Document.objects.filter(pk=bad_document.pk).update(payload=payload("peace"))
    assert tasks.sweep.apply().get() == {"testapp.Document.embedding": 1}
    assert has_vector(bad_document)
    assert list(SkippedRow.objects.values_list("object_pk", flat=True)) == [str(bad_article.pk)]

    # Once its retry time has come, an unchanged row is tried again, and its wait doubles.
    SkippedRow.objects.update(retry_after=timezone.now() - timedelta(seconds=1))
    assert tasks.sweep.apply().get() == {"testapp.Article.embedding": 1}
    record = SkippedRow.objects.get()
    assert record.failures == 2
    assert record.retry_after - record.last_seen == timedelta(seconds=2 * 3600)
    assert tasks.sweep.apply().get() == {}


@pytest.mark.django_db(transaction=True)
def test_a_field_that_fails_does_not_stop_the_sweep_of_the_others(eager, caplog):
    """The Note table is missing (a database its migrations have not reached): the sweep logs
    that field, sweeps the fields after it, and then reports the error."""
    products = Product.objects.bulk_create(
        [Product(name="bank", description="rates"), Product(name="cat", description="food")]
    )
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE testapp_note RENAME TO testapp_note_away")
    try:
        with pytest.raises(ProgrammingError), caplog.at_level(logging.ERROR, "django_sbert"):
            tasks.sweep.apply()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE testapp_note_away RENAME TO testapp_note")
    assert all(has_vector(p) for p in products)
    assert "sweep: testapp.Note.embedding failed; the other fields are swept." in caplog.text


# -- delivery: a real worker over Redis --------------------------------------------------------


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.05)


@pytest.fixture
def poisoned_worker(poisoned, settings, tmp_path) -> Iterator[Worker]:
    """A real worker on this module's queue, encoding with the poisoned model."""
    settings.SBERT = {**settings.SBERT, "QUEUE": QUEUE}
    worker = Worker(
        tmp_path / "worker.log",
        QUEUE,
        settings_module="tests.indexing.bad_rows_settings",
        env={"SBERT_TEST_POISONED": str(poisoned)},
    )
    yield worker
    worker.stop()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_worker_skips_bad_rows_and_the_sweep_leaves_them(poisoned_worker):
    with transaction.atomic():  # one embed_rows task per field, sent on commit
        documents = [
            Document.objects.create(payload=payload(title))
            for title in ["bank rates", "music", "cat and dog"]
        ]
        bad_document = Document.objects.create(payload="not json at all")
        articles = [Article.objects.create(title=title) for title in ["tax", "food", "city"]]
        bad_article = Article.objects.create(title=f"{POISON} and peace")

    wait_until(
        lambda: (
            SkippedRow.objects.count() == 2
            and all(has_vector(row) for row in [*documents, *articles])
        ),
        90,
        "the worker embedded the good rows and recorded the two bad ones",
    )
    log = poisoned_worker.output()
    assert log.count(f"Task {tasks.EMBED_TASK}") >= 2 and "raised unexpected" not in log
    assert f"testapp.Document pk={bad_document.pk} (field 'embedding')" in log
    assert f"testapp.Article pk={bad_article.pk} (field 'embedding')" in log
    assert not has_vector(bad_document) and not has_vector(bad_article)

    assert tasks.sweep.apply().get() == {}  # nothing is sent for the unchanged bad rows

    bad_document.payload = payload("peace")  # fixed: its own task embeds it
    bad_document.save()
    wait_until(lambda: has_vector(bad_document), 60, "the worker embedded the fixed row")
    wait_until(
        lambda: not SkippedRow.objects.filter(object_pk=str(bad_document.pk)).exists(),
        10,
        "its record was removed",
    )
    assert SkippedRow.objects.get().object_pk == str(bad_article.pk)


# -- a documented cap on the text one row can make the encoder read --------------------------


def one_token_words(n: int) -> list[str]:
    return [WORDS[i % len(WORDS)] for i in range(n)]


def test_chunk_mode_encodes_at_most_max_chunks_windows(tiny_encoder, caplog):
    width = tiny_encoder.max_seq_length - 2  # [CLS] and [SEP] take two places of each window
    overlap = 32
    covered = width + 2 * (width - overlap)  # tokens the first 3 windows cover
    words = one_token_words(300_000)  # ~1.7 MB of text, ~10,000 windows
    text, head = " ".join(words), " ".join(words[:covered])
    assert len(tiny_encoder.tokenizer.windows([head], overlap)) == 3

    rows = tiny_encoder.tokenizer.windows([text], overlap, max_windows=3)
    assert len(rows) == 3
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django_sbert.encoder"):
        capped = tiny_encoder.encode(text, long_text="chunk", max_chunks=3)
    np.testing.assert_allclose(capped, tiny_encoder.encode(head, long_text="chunk"), atol=1e-6)
    assert [r.getMessage() for r in caplog.records] == [
        "1 of 1 text(s) run past 3 windows of 64 tokens; only their first 3 windows are encoded "
        "(max_chunks)."
    ]
    with pytest.raises(ValueError, match="max_windows"):
        tiny_encoder.encode(text, long_text="chunk", max_chunks=0)


def test_the_tokenizer_reads_only_the_characters_it_can_use(tiny_encoder):
    """At most 32 characters per usable token reach the tokenizer: a 20 MB row costs what its
    first few kilobytes cost. Only a text with a run of thousands of spaces (no tokens) before
    its next word can tell: the word after the run is past the cap."""
    limit = tiny_encoder.max_seq_length * 32
    far = "bank" + " " * limit + "rates"
    np.testing.assert_allclose(tiny_encoder.encode(far), tiny_encoder.encode("bank"), atol=1e-6)
    near = "bank" + " " * (limit - 100) + "rates"
    np.testing.assert_allclose(
        tiny_encoder.encode(near), tiny_encoder.encode("bank rates"), atol=1e-6
    )


@pytest.mark.django_db
def test_a_huge_row_is_indexed_from_its_first_max_chunks_windows(settings, monkeypatch):
    default = settings.SBERT["ENCODERS"]["default"]
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {"default": {**default, "LONG_TEXT": "chunk"}},
    }
    monkeypatch.setattr(passage_config, "MAX_CHUNKS", 3)
    encoder = get_encoder("default")
    width = encoder.max_seq_length - 2
    covered = width + 2 * (width - 32)
    words = one_token_words(400_000)  # ~2.3 MB in one row
    article = Article.objects.create(title=words[0], body=" ".join(words[1:]))

    stats = indexing.embed_pks(article_ref(), [article.pk])
    assert stats.embedded == 1
    article.refresh_from_db()
    expected = encoder.encode(" ".join(words[:covered]), long_text="chunk")
    np.testing.assert_allclose(np.asarray(article.embedding), expected, atol=1e-6)
