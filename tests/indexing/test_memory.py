"""Indexing holds bounded memory whatever the length of the texts, and a message whose worker
dies running it is not handed from worker to worker for ever.

Memory is measured for real: the rows are indexed in a subprocess (the test database, the tiny
model), which reports the growth of its own peak resident set (``ru_maxrss``) across
``embed_pks``, after the encoder was loaded and used once. The poison pill goes through a
real Redis broker and a real Celery worker whose pool process is SIGKILLed, as the kernel's
OOM killer would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_sbert import indexing
from django_sbert.indexing import tasks
from django_sbert.indexing.embed import DEFAULT_CHUNK_ROWS
from django_sbert.models import SkippedRow
from django_sbert.serving import get_encoder
from tests.celery_app import app
from tests.testapp.models import Article, Report
from tests.worker_process import ROOT, Worker, test_database_url

QUEUE = f"sbert-test-memory-{uuid.uuid4().hex[:8]}"

# Growth of the peak RSS allowed while 32 rows of 200,000 one-token characters are indexed.
# Tokenizing the chunk whole, as before, costs over 1 GB for these rows (every token's
# offsets as Python tuples, the tokenizer's own arrays); per row, under a token budget, a
# few MB.
MEMORY_BOUND_MB = 250

MEASURE = r"""
import json, resource, sys

import django

django.setup()

from django_sbert import indexing
from django_sbert.indexing.passages import encode_with_passages
from django_sbert.indexing.rows import PendingRow

ref = indexing.get_ref("testapp.Report", "embedding")
encode_with_passages(ref, [PendingRow(0, "Warm up the encoder. " * 40, "")])  # loaded, used
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stats = indexing.embed_pks(ref, json.loads(sys.argv[1]))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kb": after - before, "embedded": stats.embedded}))
"""


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_long_texts_with_passages_are_indexed_in_bounded_memory():
    """32 rows of "!" * 200_000 (a token per character, like CJK text) with passages."""
    rows = Report.objects.bulk_create(  # bulk_create: no task sent, the subprocess embeds
        Report(title=f"report {i}", body="!" * 200_000) for i in range(32)
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": test_database_url(),
    }
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps([r.pk for r in rows])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # seconds: a few here; splitting "!!!..." was quadratic before
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["embedded"] == 32
    ref = indexing.get_ref("testapp.Report", "embedding")
    assert indexing.count_stale(ref) == 0
    passage_model = Report._meta.get_field("embedding").passage_model
    assert passage_model.objects.count() >= 32 * 100  # every row split to its passage cap
    grew_mb = measured["grew_kb"] / 1024
    assert grew_mb < MEMORY_BOUND_MB, f"peak RSS grew {grew_mb:.0f} MB indexing 32 long rows"


@pytest.mark.django_db
def test_a_token_budget_leaves_the_passages_of_a_long_text_as_they_were():
    """The passages read from the budget's tokens are those of the whole text."""
    from django_sbert.encoder.passages import passages_of, split_passages, token_budget

    tokenizer = get_encoder("default").tokenizer
    sentences = [
        "The central bank will raise interest rates this year.",
        "A child plays guitar and the man eats food in the city.",
        "Prices rise fast",  # no full stop: the next line break ends it
        "The war is over and peace is back.",
    ]
    text = "\n".join(f"{s} {i}." if i % 3 else s for i in range(400) for s in sentences)
    for max_passages in (1, 3, 10):
        (full_spans,) = tokenizer.token_spans([text])
        assert len(full_spans) > token_budget(24, max_passages)
        expected = split_passages(text, full_spans, 24, 6, max_passages)
        assert (
            passages_of(tokenizer, [text], max_tokens=24, overlap=6, max_passages=max_passages)[0]
            == expected
        )


@pytest.mark.django_db
def test_chunked_long_text_tokenizes_only_the_windows_it_encodes():
    """LONG_TEXT="chunk": the windows of a text past max_chunks are those of its start."""
    model = get_encoder("default")
    text = "the bank rates rise " * 5000
    capped = model.tokenizer.windows([text], overlap=8, max_windows=3)
    whole = model.tokenizer.windows([text], overlap=8)
    assert len(capped) == 3
    for row in range(3):
        a = capped.ids[capped.starts[row] : capped.starts[row] + capped.lengths[row]]
        b = whole.ids[whole.starts[row] : whole.starts[row] + whole.lengths[row]]
        assert a.tolist() == b.tolist()


# -- the poison pill, through a real worker -----------------------------------------------------

POISON_SETTINGS = "tests.indexing.poison_settings"


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.05)


@pytest.fixture
def poison_worker(settings, tmp_path: Path) -> Iterator[Worker]:
    """A worker on this module's queue with SBERT["MAX_DELIVERIES"] = 2."""
    settings.SBERT = {**settings.SBERT, "QUEUE": QUEUE, "MAX_DELIVERIES": 2}
    started = Worker(tmp_path / "worker.log", QUEUE, settings_module=POISON_SETTINGS)
    yield started
    started.stop()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


def embedded_count() -> int:
    return Article.objects.filter(embedding__isnull=False).count()


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_message_whose_worker_dies_is_skipped_at_max_deliveries_and_acked(poison_worker):
    """The pool process is killed while it embeds (what the OOM killer does to a chunk of huge
    texts); at its second delivery (MAX_DELIVERIES = 2) the rows of the step it died in are
    recorded as skipped, the others are embedded, and the message is acknowledged: nothing is
    delivered again."""
    ref = indexing.get_ref("testapp.Article", "embedding")
    rows = Article.objects.bulk_create(
        Article(title=f"bank rates {i}", body="the market and the economy " * 20)
        for i in range(4000)
    )
    pks = [r.pk for r in rows]
    tasks.enqueue_embed(ref, pks, chunk_size=len(pks))
    wait_until(lambda: embedded_count() > 0, 120, "the worker started writing")
    (child,) = poison_worker.child_pids()
    os.kill(child, signal.SIGKILL)
    assert embedded_count() < len(pks), "the task finished before the kill; use more rows"
    poison_worker.wait_for("WorkerLostError", timeout=60)

    def settled() -> bool:
        return embedded_count() + SkippedRow.objects.count() == len(pks)

    wait_until(settled, 180, "every row was embedded or recorded as skipped")
    skipped = SkippedRow.objects.all()
    assert 0 < skipped.count() <= DEFAULT_CHUNK_ROWS
    assert {row.stage for row in skipped} == {"worker"}
    assert {row.error for row in skipped} == {"WorkerLost"}
    assert not Article.objects.filter(
        pk__in=[int(row.object_pk) for row in skipped], embedding__isnull=False
    ).exists()
    # Acknowledged: the queue and the broker's unacknowledged messages are empty, and the
    # skipped rows stay skipped (no third delivery runs them).
    time.sleep(3)
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        assert client.llen(QUEUE) == 0
        assert not [m for m in client.hvals("unacked") if QUEUE.encode() in m]
    assert embedded_count() + skipped.count() == len(pks)
    assert "recorded as skipped" in poison_worker.output()
    # The sweep leaves them alone until their retry time.
    assert tasks.enqueue_stale(ref, leave_skipped=True) == 0
