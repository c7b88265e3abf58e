"""Every Celery task of django-sbert, where Celery's autodiscovery looks for them.

The tasks live with their workflow (``indexing.tasks``, ``finetuning.tasks``,
``evaluation.tasks``, ``feedback.tasks``, ``feedback.learning_tasks``); their names are
in ``django_sbert.celery`` and never change, so a message queued by an older release still
runs. Importing from here keeps working::

    from django_sbert.tasks import embed_rows, enqueue_embed, sweep
"""

from __future__ import annotations

from .celery import (
    EMBED_TASK,
    EVALUATE_TASK,
    FEEDBACK_LOOP_TASK,
    FEEDBACK_PURGE_TASK,
    PROMOTE_TASK,
    SWEEP_TASK,
    TRAIN_TASK,
)
from .evaluation.tasks import evaluate_lists
from .feedback.learning_tasks import feedback_loop
from .feedback.tasks import feedback_purge
from .finetuning.tasks import enqueue_promotion, enqueue_training, promote_version, train_encoder
from .indexing.tasks import (
    MAX_PKS_PER_TASK,
    PUBLISH_RETRY_POLICY,
    TRANSIENT_ERRORS,
    embed_rows,
    enqueue_embed,
    enqueue_stale,
    sweep,
)

__all__ = [
    "EMBED_TASK",
    "EVALUATE_TASK",
    "FEEDBACK_LOOP_TASK",
    "FEEDBACK_PURGE_TASK",
    "MAX_PKS_PER_TASK",
    "PROMOTE_TASK",
    "PUBLISH_RETRY_POLICY",
    "SWEEP_TASK",
    "TRAIN_TASK",
    "TRANSIENT_ERRORS",
    "embed_rows",
    "enqueue_embed",
    "enqueue_promotion",
    "enqueue_stale",
    "enqueue_training",
    "evaluate_lists",
    "feedback_loop",
    "feedback_purge",
    "promote_version",
    "sweep",
    "train_encoder",
]
