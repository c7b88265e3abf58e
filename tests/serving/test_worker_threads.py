"""Each Celery worker process gives torch its share of the CPUs (``serving.worker``).

Real worker subprocesses on Redis with ``THREADS`` unset; a task reports
``torch.get_num_threads()`` from the process that ran it, through the result backend. A solo
or threads pool is one process that encodes one batch at a time: it gets every CPU, whatever
concurrency Celery shows (``--pool solo`` without ``-c`` shows the CPU count). Each child of
``--pool prefork -c 2`` gets half.
"""

from __future__ import annotations

import uuid

import pytest
from celery import Celery

from django_sbert.serving.worker import available_cpus, pool_name, worker_processes
from tests.settings import CELERY_BROKER_URL
from tests.worker_process import Worker

TASK = "tests.serving.torch_threads"


def run_in_worker(tmp_path, pool: tuple[str, ...], tasks: int, hold: float) -> list[dict]:
    """Start a worker with ``pool``, send it ``tasks`` tasks at once, return their answers."""
    queue = f"sbert-threads-{uuid.uuid4().hex[:8]}"
    probe = Celery("probe", broker=CELERY_BROKER_URL, backend=CELERY_BROKER_URL)
    worker = Worker(
        tmp_path / "worker.log",
        queue,
        settings_module="tests.serving.threads_worker_settings",
        pool=pool,
    )
    try:
        sent = [probe.send_task(TASK, args=(hold,), queue=queue) for _ in range(tasks)]
        answers = [result.get(timeout=180) for result in sent]
        log = worker.output()
    finally:
        worker.stop()
        with probe.connection_for_write() as connection:
            connection.default_channel.queue_purge(queue)
    assert "loaded encoders ['default']" in log, log[-3000:]  # the warm-up ran in the worker
    return answers


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_solo_worker_without_concurrency_gives_torch_every_cpu(tmp_path):
    answers = run_in_worker(tmp_path, ("--pool", "solo"), tasks=1, hold=0)
    assert answers[0]["threads"] == available_cpus()


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_threads_pool_is_one_process_with_every_cpu(tmp_path):
    answers = run_in_worker(tmp_path, ("--pool", "threads", "-c", "4"), tasks=2, hold=0)
    assert {answer["pid"] for answer in answers} == {answers[0]["pid"]}
    assert [answer["threads"] for answer in answers] == [available_cpus()] * 2


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_each_prefork_child_gets_its_share_of_the_cpus(tmp_path):
    # Two tasks that each hold their process a moment: the second goes to the idle child.
    answers = run_in_worker(tmp_path, ("--pool", "prefork", "-c", "2"), tasks=2, hold=2.0)
    assert [answer["threads"] for answer in answers] == [max(1, available_cpus() // 2)] * 2


@pytest.mark.parametrize(
    ("pool", "concurrency", "processes"),
    [
        ("solo", 8, 1),
        ("celery.concurrency.solo:TaskPool", 8, 1),
        ("threads", 8, 1),
        ("prefork", 3, 3),
        ("prefork", "auto", available_cpus()),  # Celery resolves "auto" after worker_init
    ],
)
def test_processes_sharing_the_cpus_come_from_the_pool(pool, concurrency, processes):
    class Controller:  # the two attributes of Celery's WorkController that are read
        pool_cls = pool

    Controller.concurrency = concurrency
    assert worker_processes(Controller()) == processes


def test_a_pool_class_or_its_subclass_is_named_by_its_alias():
    from celery.concurrency.solo import TaskPool

    class MySolo(TaskPool):
        pass

    assert pool_name(TaskPool) == pool_name(MySolo) == pool_name("solo") == "solo"
    assert pool_name("prefork") == "prefork"
    assert pool_name("no.such.module:Pool") == "no.such.module:Pool"
