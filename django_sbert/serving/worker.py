"""Per-process setup of Celery workers: torch threads, and encoders loaded before the first task.

Connected when a tasks module of django-sbert is imported (``indexing.tasks``,
``finetuning.tasks``), which Celery's autodiscovery does in the worker's main process before it
forks:

* ``worker_init`` (main process) records the worker; nothing heavy happens there, so no torch
  state is inherited by forked children (transformers #7516, sentence-transformers #1318).
* ``worker_process_init`` (each prefork child, or the solo worker itself) sets torch's thread
  count (``THREADS``, else the CPUs divided by the pool's processes: ``worker_processes()``)
  and loads every encoder an ``EmbeddingField`` uses in a background thread, so the child still
  reports "up" to its parent in time. Pools that never fork (threads, gevent, eventlet) do the
  same from ``worker_init``, and warm up before they start consuming, having no parent waiting.
* ``task_prerun`` makes a task that arrives before the warm-up has finished wait for it: two
  threads compiling the same graph at once fail inside Dynamo, and the export's tracer patches
  ``nn.Module.__call__`` for every thread while it traces.
* A worker that consumes ``SBERT["TRAINING"]["QUEUE"]`` and not ``SBERT["QUEUE"]`` loads none:
  a training run and a promotion load the models they need, never the serving one.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from celery import concurrency as celery_pools
from celery import signals
from celery.signals import task_prerun, worker_init, worker_process_init
from django.apps import apps

from ..conf import encoder_config, sbert_settings
from ..fields import all_embedding_fields
from . import query_client
from .warmup import warm

logger = logging.getLogger(__name__)

_worker: Any = None  # the WorkController, set by worker_init, inherited by forked children
_worker_app: Any = None  # the worker's Celery app, set by worker_init
# A spawned prefork child (``--pool-start-method spawn``) inherits no memory: the parent
# leaves the number of pool processes in the environment for it.
PROCESSES_VARIABLE = "DJANGO_SBERT_WORKER_PROCESSES"
# Pools that run every task in the worker's one process. Encodes of one model hold its lock
# (serving.cache), so one encode runs at a time there: torch gets all the CPUs, whatever -c
# says (-c only sets how many tasks the pool accepts at once).
ONE_PROCESS_POOLS = ("solo", "threads", "gevent", "eventlet")


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def torch_threads(encoder: str = "default", concurrency: int | None = None) -> int:
    """Threads one process should give torch: THREADS if set, else its share of the CPUs.

    ``concurrency`` is how many processes share the CPUs (a web server's workers); None: the
    processes of this Celery worker's pool (``worker_processes()``), 1 outside a worker.
    """
    configured = encoder_config(encoder).get("THREADS")
    if configured:
        return int(configured)
    processes = concurrency if concurrency is not None else worker_processes()
    return max(1, available_cpus() // max(1, processes))


def pool_name(pool_cls: Any) -> str:
    """The pool's alias (``"solo"``, ``"prefork"``, ``"threads"``...) or its dotted path.

    ``pool_cls`` is what the worker holds: a class (``-P solo`` on the command line), or an
    alias or ``"module:Class"`` string (``worker_pool`` in the configuration); a subclass of
    a known pool counts as that pool.
    """
    try:
        cls = celery_pools.get_implementation(pool_cls)
    except (ImportError, AttributeError, ValueError):  # gevent not installed, a typo...
        return str(pool_cls)
    for alias, path in celery_pools.ALIASES.items():
        if not path or alias in ("processes", "custom"):
            continue
        module, _, name = path.partition(":")
        known = getattr(sys.modules.get(module), name, None)
        if known is not None and isinstance(cls, type) and issubclass(cls, known):
            return alias
    return f"{getattr(cls, '__module__', '')}:{getattr(cls, '__qualname__', cls)}"


def worker_processes(worker: Any = None) -> int:
    """How many processes of this Celery worker share the CPUs, each encoding on its own.

    1 for a solo, threads, gevent or eventlet pool (one process); the concurrency for a
    prefork pool (``-c N``; ``"auto"`` as Celery resolves it) or any other pool. 1 outside a
    worker.
    """
    worker = worker if worker is not None else _worker
    if worker is None:
        return int(os.environ.get(PROCESSES_VARIABLE) or 1)
    if pool_name(getattr(worker, "pool_cls", "prefork")) in ONE_PROCESS_POOLS:
        return 1
    concurrency = getattr(worker, "concurrency", None)
    try:
        return max(1, int(concurrency))
    except (TypeError, ValueError):  # "auto" before Celery resolved it (at worker_init)
        return available_cpus()


@worker_init.connect(dispatch_uid="django_sbert.serving.worker.worker_init")
def _remember_worker(sender: Any = None, **kwargs: Any) -> None:
    global _worker, _worker_app
    _worker = sender
    _worker_app = getattr(sender, "app", None)
    if sender is not None and pool_name(getattr(sender, "pool_cls", "prefork")) in (
        "threads",
        "gevent",
        "eventlet",
    ):
        prepare_worker_process()  # these pools send no worker_process_init: no fork either


def _before_fork(**kwargs: Any) -> None:
    # In the parent, once Celery resolved the concurrency: what a spawned child reads.
    os.environ[PROCESSES_VARIABLE] = str(worker_processes())


# Sent by the prefork pool before it creates each child (Celery 5.3+).
_create_process = getattr(signals, "worker_before_create_process", None)
if _create_process is not None:
    _create_process.connect(_before_fork, dispatch_uid="django_sbert.serving.worker.before_fork")


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

    In a prefork child, loading happens in a background thread: the child must report "up"
    to its parent within ``worker_proc_alive_timeout`` (4 s), less than importing torch and
    loading a model can take, and a task that arrives first waits until the warm-up has
    finished (``task_prerun``). A one-process pool warms up here, before its worker consumes
    anything, so its "ready" line means the encoders are warm.
    """
    if not apps.ready:  # a Celery app that does not run Django: nothing of ours to load
        return
    # A worker loads the model for its tasks anyway: while the host's query server is away,
    # the searches its tasks run (the gate, evaluations) encode here rather than fail.
    query_client.encode_here_when_away()
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
    if _worker is not None and pool_name(getattr(_worker, "pool_cls", "prefork")) in (
        ONE_PROCESS_POOLS
    ):
        _warm_up(names, threads)  # before consuming: "ready" means warm (see the docstring)
        return
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
