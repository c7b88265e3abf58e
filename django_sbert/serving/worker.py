"""Per-process setup of Celery workers: torch threads, and encoders loaded before the first task.

Connected when a tasks module of django-sbert is imported (``indexing.tasks``,
``finetuning.tasks``), which Celery's autodiscovery does in the worker's main process before it
forks:

* ``worker_init`` (main process) records the worker; nothing heavy happens there, so no torch
  state is inherited by forked children (transformers #7516, sentence-transformers #1318).
* ``worker_process_init`` (each prefork child, or the solo worker itself) sets torch's thread
  count explicitly — ``SBERT["ENCODERS"][name]["THREADS"]``, else the CPUs divided by the
  processes of the pool (``worker_processes()``: ``-c N`` prefork children share the CPUs;
  a solo, threads, gevent or eventlet worker is one process that runs one encode at a time,
  so it gets them all) — and starts loading every encoder an ``EmbeddingField`` uses, once
  per process, in a background thread so the child still reports "up" to its parent in time.
  Pools that send no ``worker_process_init`` (threads, gevent, eventlet) do the same from
  ``worker_init``: they never fork.
  A task that arrives before the encoders are loaded waits for them (``task_prerun``), a
  few seconds; it does not wait for the compiled graphs. The warm-up thread is the process's
  graph builder (``encoder.compiled.building_graphs``): while it compiles (30-60 s on two
  cores for a new host's first worker), a task's encode runs eager, the same vectors within
  1e-5, and once the graphs are built every encode takes them. So the first rows are
  searchable seconds after the worker says "ready", and two threads never compile one graph
  at once (which fails inside Dynamo).
  A worker that consumes ``SBERT["TRAINING"]["QUEUE"]`` and not ``SBERT["QUEUE"]`` loads none:
  a training run and a promotion load the models they need (the base or a candidate
  version), never the serving one, so warming it would only take the cores from the
  indexing worker at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any

from celery import concurrency as celery_pools
from celery import signals
from celery.signals import task_prerun, worker_init, worker_process_init
from django.apps import apps

from ..conf import encoder_config, sbert_settings
from ..fields import all_embedding_fields
from .cache import encoder_for
from .versions import serving_record
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


# Set while no encoder is being loaded in this process. A task waits for it (task_prerun):
# loading takes seconds; the compiles after it run beside the tasks (see the docstring).
_loaded = threading.Event()
_loaded.set()
WARM_UP_WAIT_SECONDS = 900.0


def _warm_up(names: list[str], threads: int) -> None:
    try:
        _warm_encoders(names, threads)
    finally:
        _loaded.set()


def _warm_encoders(names: list[str], threads: int) -> None:
    import torch  # in the child process only, after fork

    from ..encoder.compiled import building_graphs  # imports torch: after fork too

    torch.set_num_threads(threads)  # a process-wide value, picked up by every thread
    started = time.perf_counter()
    with building_graphs():
        for name in names:
            # A broken encoder: warm() below reports it, with its traceback.
            with contextlib.suppress(Exception):
                encoder_for(serving_record(name))
        _loaded.set()
        logger.info(
            "django-sbert: worker process %d loaded encoders %s with %d torch threads in "
            "%.1f s; tasks run now, eager until the compiled graphs are built.",
            os.getpid(),
            names,
            threads,
            time.perf_counter() - started,
        )
        # Both shapes: the sweep and promotions encode batches, a saved row is a batch of one.
        states = warm(names, role="both", locked=False)
    failed = [state for state in states.values() if state.error]
    if failed:  # warm() logged the traceback: a broken encoder must not kill the worker
        return
    logger.info(
        "django-sbert: worker process %d warmed encoders %s in %.1f s (%s).",
        os.getpid(),
        names,
        time.perf_counter() - started,
        ", ".join(f"{state.encoder}: {state.path}" for state in states.values()),
    )


@worker_process_init.connect(dispatch_uid="django_sbert.serving.worker.worker_process_init")
def prepare_worker_process(**kwargs: Any) -> None:
    """Set torch threads and start loading the encoders in this worker process (after fork).

    Loading happens in a background thread: a prefork child must report "up" to its parent
    within ``worker_proc_alive_timeout`` (4 s), less than importing torch and loading a model
    can take. A task that arrives first waits until the encoders are loaded (``task_prerun``),
    not for the compiles that follow.
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
    _loaded.clear()
    threading.Thread(
        target=_warm_up, args=(names, threads), name="django-sbert-warm-up", daemon=True
    ).start()


@task_prerun.connect(dispatch_uid="django_sbert.serving.worker.task_prerun")
def wait_for_warm_up(**kwargs: Any) -> None:
    """Hold a task until this process's encoders are loaded (at most WARM_UP_WAIT_SECONDS);
    the compiles after the load do not hold it."""
    if _loaded.is_set():
        return
    logger.info("django-sbert: task waits for this worker process's encoders to load.")
    if not _loaded.wait(WARM_UP_WAIT_SECONDS):
        logger.warning(
            "django-sbert: loading the encoders took longer than %.0f s; the task runs anyway.",
            WARM_UP_WAIT_SECONDS,
        )
