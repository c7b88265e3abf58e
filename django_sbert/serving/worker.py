"""Per-process setup of Celery workers: torch threads, and encoders loaded before the first task.

Connected when a tasks module of django-sbert is imported (``indexing.tasks``,
``finetuning.tasks``), which Celery's autodiscovery does in the worker's main process before it
forks:

* ``worker_init`` (main process) records the pool's concurrency; nothing heavy happens there,
  so no torch state is inherited by forked children (transformers #7516,
  sentence-transformers #1318).
* ``worker_process_init`` (each prefork child, or the solo worker itself) sets torch's thread
  count explicitly — ``SBERT["ENCODERS"][name]["THREADS"]`` or the CPUs divided by the
  concurrency — and starts loading every encoder an ``EmbeddingField`` uses, once per
  process, in a background thread so the child still reports "up" to its parent in time.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from celery.signals import worker_init, worker_process_init
from django.apps import apps

from ..conf import encoder_config
from ..fields import all_embedding_fields
from .warmup import warm

logger = logging.getLogger(__name__)

_concurrency = 1  # set in the worker's main process by worker_init, inherited by children


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


@worker_init.connect(dispatch_uid="django_sbert.serving.worker.worker_init")
def _remember_concurrency(sender: Any = None, **kwargs: Any) -> None:
    global _concurrency
    _concurrency = int(getattr(sender, "concurrency", None) or 1)


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


def _warm_up(names: list[str], threads: int) -> None:
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
    can take. A task that arrives first waits for the same load (``get_encoder`` locks).
    """
    if not apps.ready:  # a Celery app that does not run Django: nothing of ours to load
        return
    names = sorted({field.encoder for _, field in all_embedding_fields()})
    if not names:
        return
    threads = torch_threads(names[0])
    set_torch_threads(threads)
    threading.Thread(
        target=_warm_up, args=(names, threads), name="django-sbert-warm-up", daemon=True
    ).start()
