"""Which Celery queues have a worker consuming them (asked of the workers and cached), and how
many messages wait in them.

::

    consumed_queues()            # frozenset({"sbert", "sbert-train"}), or None: nobody to ask
    queue_has_worker("sbert-train")   # True, False, or None when it cannot be known
    queue_lengths(["sbert-train"])    # {"sbert-train": 3}: messages waiting, from the broker
    waiting_without_worker()     # [("sbert-train", "training", 3)]: messages nobody will take

The admin's run page and ``sbert_status`` use this to say a queued run waits for no one. The
workers are asked (``inspect().active_queues()``) for at most ``REPLY_SECONDS`` and the answer
is cached for ``CACHE_SECONDS``; a ``--pool solo`` worker busy with a long task looks absent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from django.core.cache import cache

from ..conf import sbert_settings

logger = logging.getLogger(__name__)

REPLY_SECONDS = 1.0  # how long the workers' replies are awaited
CACHE_SECONDS = 30.0  # how long an answer is reused, in Django's cache
CACHE_KEY = "django_sbert:consumed_queues"
_UNKNOWN = "unknown"  # cached when the broker could not be asked (None is "not cached")


def ask_workers(timeout: float = REPLY_SECONDS) -> frozenset[str] | None:
    """The queues every worker that answers within ``timeout`` consumes, uncached.

    None when there is nobody to ask: tasks run eagerly (``task_always_eager``), or the broker
    cannot be reached.
    """
    from celery import current_app  # the project's app, configured once Django has loaded

    if current_app.conf.task_always_eager:
        return None
    try:
        with current_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=0, timeout=timeout)
            inspector = current_app.control.inspect(timeout=timeout, connection=connection)
            replies = inspector.active_queues() or {}
    except Exception as exc:  # kombu, redis and amqp raise many types for one outage
        logger.info("Could not ask the Celery workers for their queues: %s", exc)
        return None
    return frozenset(
        queue["name"] for queues in replies.values() for queue in queues or () if "name" in queue
    )


def consumed_queues() -> frozenset[str] | None:
    """``ask_workers()``, answered from Django's cache when asked in the last CACHE_SECONDS."""
    cached = cache.get(CACHE_KEY)
    if cached is not None:
        return None if cached == _UNKNOWN else frozenset(cached)
    queues = ask_workers()
    cache.set(CACHE_KEY, _UNKNOWN if queues is None else sorted(queues), CACHE_SECONDS)
    return queues


def queue_has_worker(queue: str) -> bool | None:
    """Whether a worker consumes ``queue`` (cached); None when that cannot be known."""
    queues = consumed_queues()
    return None if queues is None else queue in queues


def forget_consumed_queues() -> None:
    """Drop the cached answer, so the next question asks the workers again."""
    cache.delete(CACHE_KEY)


def queue_lengths(names: Iterable[str], timeout: float = REPLY_SECONDS) -> dict[str, int] | None:
    """Messages waiting in each queue, as the broker counts them (a Redis list's length).

    A queue the broker does not know holds nothing. None when the broker cannot be asked.
    """
    from amqp.exceptions import ChannelError  # kombu raises amqp's errors for every transport
    from celery import current_app  # the project's app, configured once Django has loaded

    if current_app.conf.task_always_eager:
        return None
    lengths: dict[str, int] = {}
    try:
        with current_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=0, timeout=timeout)
            for name in names:
                channel = connection.channel()
                try:
                    lengths[name] = int(channel.queue_declare(queue=name, passive=True)[1])
                except ChannelError:  # 404: no such queue (kombu's Redis raises the base class)
                    lengths[name] = 0
                finally:
                    channel.close()
    except Exception as exc:  # kombu, redis and amqp raise many types for one outage
        logger.info("Could not ask the broker for queue lengths: %s", exc)
        return None
    return lengths


def _wanted() -> tuple[tuple[str, str, str], ...]:
    return (
        (sbert_settings.QUEUE, "indexing", "saved rows wait to be embedded"),
        (sbert_settings.TRAINING["QUEUE"], "training", "fine-tuning runs and promotions wait"),
    )


def missing_workers(
    queues: frozenset[str] | None, lengths: Mapping[str, int] | None = None
) -> list[str]:
    """A sentence for each django-sbert queue that no worker in ``queues`` consumes, with the
    messages waiting in it when ``lengths`` (``queue_lengths()``) says.

    Empty when ``queues`` is None (nobody could be asked): an unknown is not reported as absent.
    """
    if queues is None:
        return []
    lines = []
    for queue, kind, waiting in _wanted():
        if queue in queues:
            continue
        count = (lengths or {}).get(queue)
        held = "" if count is None else f" ({count} message{'s' if count != 1 else ''} waiting)"
        lines.append(
            f"No worker is consuming the {kind} queue {queue!r}{held}: {waiting} until one "
            f"starts (celery -A <project> worker -Q {queue})."
        )
    return lines


def waiting_without_worker() -> list[tuple[str, str, int]]:
    """(queue, kind, messages) of each django-sbert queue that holds messages no live worker
    consumes; empty when the workers or the broker cannot be asked. Uncached."""
    consumed = ask_workers()
    if consumed is None:
        return []
    lengths = queue_lengths([queue for queue, _, _ in _wanted() if queue not in consumed])
    if lengths is None:
        return []
    return [
        (queue, kind, lengths[queue])
        for queue, kind, _ in _wanted()
        if queue not in consumed and lengths.get(queue, 0) > 0
    ]


def training_worker_hint() -> str | None:
    """The training queue's sentence of ``missing_workers``, from the cached answer, or None."""
    queue = sbert_settings.TRAINING["QUEUE"]
    if queue_has_worker(queue) is not False:
        return None
    return (
        f"No worker is consuming the training queue {queue!r}: this run waits until one starts "
        f"(celery -A <project> worker -Q {queue}). Asked the workers at most "
        f"{CACHE_SECONDS:.0f} s ago."
    )
