"""Per-process setup of Celery workers: torch threads, and encoders loaded before the first task.

Connected when a tasks module of django-sbert is imported (``indexing.tasks``,
``finetuning.tasks``), which Celery's autodiscovery does in the worker's main process before it
forks:

* ``worker_init`` (main process) records the pool's concurrency; nothing heavy happens there,
  so no torch state is inherited by forked children (transformers #7516,
  sentence-transformers #1318).
* ``worker_process_init`` (each prefork child, or the solo worker itself) sets torch's thread
  count explicitly — ``SBERT["ENCODERS"][name]["THREADS"]``, else every CPU for ``--pool solo``
  and the CPUs divided by the concurrency for ``-P prefork -c N`` — and starts loading every
  encoder an ``EmbeddingField`` uses, once per process, in a background thread so the child
  still reports "up" to its parent in time.
  A task that arrives before the warm-up has finished waits for it (``task_prerun``): two
  threads compiling the same graph at once fail inside Dynamo.
  A worker that consumes ``SBERT["TRAINING"]["QUEUE"]`` and not ``SBERT["QUEUE"]`` loads none:
  a training run and a promotion load the models they need (the base or a candidate
  version), never the serving one, so warming it would only take the cores from the
  indexing worker at start-up.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from celery.concurrency.solo import TaskPool as SoloPool
from celery.signals import task_prerun, worker_init, worker_process_init
from django.apps import apps

from ..conf import encoder_config, sbert_settings
from ..fields import all_embedding_fields
from .warmup import warm

logger = logging.getLogger(__name__)

_concurrency = 1  # set in the worker's main process by worker_init, inherited by children
_worker_app: Any = None  # the worker's Celery app, set by worker_init


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def torch_threads(encoder: str = "default", concurrency: int | None = None) -> int:
    """Threads one worker process should give torch: THREADS if set, else CPUs / concurrency."""
    configured = encoder_config(encoder).get("THREADS")
    if configured:
        return int(configured)
    return max(1, available_cpus() // max(1, concurrency or _concurrency))


def pool_processes(worker: Any) -> int:
    """Processes that encode in a Celery worker (its ``WorkController``): 1 for ``--pool
    solo``, whose concurrency Celery still sets to the CPU count unless ``-c`` is given (so
    dividing the CPUs by it gave a one-process worker one torch thread); else its
    concurrency."""
    pool = getattr(worker, "pool_cls", None)
    if pool == "solo" or (isinstance(pool, type) and issubclass(pool, SoloPool)):
        return 1
    try:
        return max(1, int(getattr(worker, "concurrency", None) or 1))
    except (TypeError, ValueError):  # "auto", resolved by Celery after worker_init
        return available_cpus()


@worker_init.connect(dispatch_uid="django_sbert.serving.worker.worker_init")
def _remember_concurrency(sender: Any = None, **kwargs: Any) -> None:
    global _concurrency, _worker_app
    _concurrency = pool_processes(sender)
    _worker_app = getattr(sender, "app", None)


def own_queues(app: Any = None) -> set[str] | None:
    """Names of the queues this worker process consumes (``-Q``); None when unknown (not a
    worker). ``finetuning.queues.consumed_queues()`` is another question: what every worker
    consumes.

    Read when the pool starts: ``worker_init`` comes before the worker selects its queues.
    """
    app = app or _worker_app
    if app is None:
        return None
    try:
        return set(app.amqp.queues.consume_from)
    except Exception:  # noqa: BLE001 - an app without the usual AMQP set-up: assume all
        return None


def serves_encoders(queues: set[str] | None) -> bool:
    """Whether a worker consuming ``queues`` encodes with the serving versions.

    Only a worker that takes the training queue and not the indexing one does not: its
    training runs and promotions load their own models.
    """
    if queues is None:
        return True
    return not (sbert_settings.TRAINING["QUEUE"] in queues and sbert_settings.QUEUE not in queues)


def set_torch_threads(threads: int) -> None:
    """Give torch ``threads`` intra-op threads in this process, importing nothing heavy.

    If torch is not imported yet, the OpenMP/MKL variables make its import use ``threads``;
    if it already is (a parent imported it before forking), set it directly.
    """
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


# Set while no warm-up is running in this process. A task waits for it (task_prerun): two
# threads compiling one graph at once made Dynamo fail ("RuntimeError: custom") on a task
# that arrived while the warm-up was still compiling.
_warm = threading.Event()
_warm.set()
WARM_UP_WAIT_SECONDS = 900.0


def _warm_up(names: list[str], threads: int) -> None:
    try:
        _warm_encoders(names, threads)
    finally:
        _warm.set()


def _warm_encoders(names: list[str], threads: int) -> None:
    import torch  # in the child process only, after fork

    torch.set_num_threads(threads)  # a process-wide value, picked up by every thread
    # Both shapes: the sweep and promotions encode batches, a saved row is a batch of one.
    states = warm(names, role="both")
    failed = [state for state in states.values() if state.error]
    if failed:  # warm() logged the traceback: a broken encoder must not kill the worker
        return
    logger.info(
        "django-sbert: worker process %d loaded encoders %s with %d torch threads.",
        os.getpid(),
        names,
        threads,
    )


@worker_process_init.connect(dispatch_uid="django_sbert.serving.worker.worker_process_init")
def prepare_worker_process(**kwargs: Any) -> None:
    """Set torch threads and start loading the encoders in this worker process (after fork).

    Loading happens in a background thread: a prefork child must report "up" to its parent
    within ``worker_proc_alive_timeout`` (4 s), less than importing torch and loading a model
    can take. A task that arrives first waits until the warm-up has finished (``task_prerun``).
    """
    if not apps.ready:  # a Celery app that does not run Django: nothing of ours to load
        return
    names = sorted({field.encoder for _, field in all_embedding_fields()})
    if not names:
        return
    threads = torch_threads(names[0])
    set_torch_threads(threads)
    queues = own_queues()
    if not serves_encoders(queues):
        logger.info(
            "django-sbert: worker process %d consumes %s only: no encoder loaded before the "
            "first task (training runs and promotions load their own models).",
            os.getpid(),
            sorted(queues or ()),
        )
        return
    _warm.clear()
    threading.Thread(
        target=_warm_up, args=(names, threads), name="django-sbert-warm-up", daemon=True
    ).start()


@task_prerun.connect(dispatch_uid="django_sbert.serving.worker.task_prerun")
def wait_for_warm_up(**kwargs: Any) -> None:
    """Hold a task until this process's warm-up has finished (at most WARM_UP_WAIT_SECONDS)."""
    if _warm.is_set():
        return
    logger.info("django-sbert: task waits for this worker process's encoders to warm up.")
    if not _warm.wait(WARM_UP_WAIT_SECONDS):
        logger.warning(
            "django-sbert: the warm-up took longer than %.0f s; the task runs anyway.",
            WARM_UP_WAIT_SECONDS,
        )
