"""Celery wire format and beat schedule: task names, and the sweep's ``beat_schedule`` entry.

Task names are part of the wire format (a queued message names its task), so they are defined
once here and never change, wherever the task functions live::

    django_sbert.embed_rows       indexing/tasks.py     SBERT["QUEUE"]
    django_sbert.sweep            indexing/tasks.py     SBERT["QUEUE"]
    django_sbert.train_encoder    finetuning/tasks.py   SBERT["TRAINING"]["QUEUE"]
    django_sbert.promote_version  finetuning/tasks.py   SBERT["TRAINING"]["QUEUE"]
    django_sbert.evaluate_lists   evaluation/tasks.py   SBERT["TRAINING"]["QUEUE"]
    django_sbert.feedback_purge   feedback/tasks.py     SBERT["QUEUE"]
    django_sbert.feedback_loop    feedback/learning_tasks.py  SBERT["TRAINING"]["QUEUE"]

The ``*_schedule()`` functions build ``beat_schedule`` entries for a project's Celery
configuration (docs/indexing.md for the sweep, docs/reference.md for the others).

This module imports no Django model and no torch (``conf`` reads settings lazily), so a
settings module may import it. The worker's per-process setup (torch threads, encoders loaded
before the first task) is in ``django_sbert.serving.worker``.
"""

from __future__ import annotations

from typing import Any

from .conf import DEFAULTS, sbert_settings

EMBED_TASK = "django_sbert.embed_rows"
SWEEP_TASK = "django_sbert.sweep"
TRAIN_TASK = "django_sbert.train_encoder"
PROMOTE_TASK = "django_sbert.promote_version"
EVALUATE_TASK = "django_sbert.evaluate_lists"
FEEDBACK_PURGE_TASK = "django_sbert.feedback_purge"
FEEDBACK_LOOP_TASK = "django_sbert.feedback_loop"

DEFAULT_SWEEP_EVERY = 300.0  # seconds


def _entry(task: str, every: float, queue: str, **kwargs: Any) -> dict[str, Any]:
    """A ``beat_schedule`` entry that expires after one interval, so a stopped worker does not
    come back to a pile of identical runs."""
    entry: dict[str, Any] = {"task": task, "schedule": float(every)}
    if kwargs:
        entry["kwargs"] = kwargs
    entry["options"] = {"queue": queue, "expires": float(every)}
    return entry


def sweep_schedule(every: float = DEFAULT_SWEEP_EVERY, queue: str | None = None) -> dict[str, Any]:
    """A ``beat_schedule`` entry running the sweep every ``every`` seconds on the SBERT queue;
    the tasks it sends expire after one interval too."""
    return _entry(
        SWEEP_TASK, every, sbert_settings.QUEUE if queue is None else queue, expires=float(every)
    )


# The entry with the default queue name, for settings modules (no Django access at import).
SWEEP_SCHEDULE: dict[str, Any] = _entry(
    SWEEP_TASK, DEFAULT_SWEEP_EVERY, DEFAULTS["QUEUE"], expires=DEFAULT_SWEEP_EVERY
)


def evaluation_schedule(
    hours: float | None = 24.0, queue: str | None = None
) -> dict[str, Any] | None:
    """A ``beat_schedule`` entry evaluating every judgment list every ``hours`` (daily) on the
    training queue; None when ``hours`` is None."""
    if hours is None:
        return None
    queue = sbert_settings.TRAINING["QUEUE"] if queue is None else queue
    return _entry(EVALUATE_TASK, float(hours) * 3600.0, queue, trigger="schedule")


def feedback_purge_schedule(every: float = 86400.0, queue: str | None = None) -> dict[str, Any]:
    """A ``beat_schedule`` entry deleting searches and events past
    ``SBERT["FEEDBACK"]["RETENTION_DAYS"]`` every ``every`` seconds (daily) on the SBERT queue."""
    return _entry(FEEDBACK_PURGE_TASK, every, sbert_settings.QUEUE if queue is None else queue)


def feedback_loop_schedule(
    hours: float | None = 24.0, queue: str | None = None
) -> dict[str, Any] | None:
    """A ``beat_schedule`` entry running the feedback loop every ``hours`` (daily) on the
    training queue; None when ``hours`` is None."""
    if hours is None:
        return None
    queue = sbert_settings.TRAINING["QUEUE"] if queue is None else queue
    return _entry(FEEDBACK_LOOP_TASK, float(hours) * 3600.0, queue)
