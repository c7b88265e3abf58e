"""What a running training run writes while it runs, for the run page, the API and recovery.

``Heartbeat`` keeps ``updated_at`` fresh through every phase (so ``recovery`` fails only runs
whose worker is gone), ``Reporter`` writes step, loss history and notices a cancellation,
``EvalTracker`` writes early stopping's measurements (``TrainingRun.evaluations``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.utils import timezone

from ..conf import sbert_settings
from ..models import RunStatus, TrainingRun

# A run's log lines, from its creation to its end, under the name they always had.
logger = logging.getLogger("django_sbert.finetuning.runs")

# A run writes its step and loss history at most this often: fresh enough for the run page,
# rare enough that a fast step does not wait on a database write.
PROGRESS_SECONDS = 2.0


class Heartbeat:
    """Write the run's ``updated_at`` from a thread while every phase of the run goes on.

    Loading the base model, the evaluations before and after training and saving can each
    take minutes on a large model or eval split, without a training step to report; the
    heartbeat keeps ``updated_at`` fresh through all of them, so ``recovery.fail_dead_runs``
    fails only a run whose worker is gone (the thread dies with the process). It beats three
    times per ``SBERT["TRAINING"]["STALLED_SECONDS"]`` at least, and never more often than
    progress is written (``PROGRESS_SECONDS``).
    """

    def __init__(self, run_pk: int) -> None:
        self.run_pk = run_pk
        stalled = float(sbert_settings.TRAINING["STALLED_SECONDS"])
        self.every = max(0.05, min(PROGRESS_SECONDS, stalled / 3))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"django-sbert-heartbeat-{run_pk}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.every):
                TrainingRun.objects.filter(pk=self.run_pk, status=RunStatus.RUNNING).update(
                    updated_at=timezone.now()
                )
        except Exception:  # a lost database connection: the run's own writes will report it
            logger.exception("Heartbeat of training run %s stopped", self.run_pk)
        finally:
            connections.close_all()  # this thread's own connections


@dataclass(eq=False)
class Reporter:
    """Progress and loss history for the admin, written at most every few seconds."""

    run: TrainingRun
    history: list[list[float]] = field(default_factory=list)
    step: int = 0
    total: int = 0
    every: float = field(default_factory=lambda: PROGRESS_SECONDS)  # read when a run starts
    last_write: float = 0.0
    last_check: float = 0.0
    cancelled: bool = False

    def __call__(self, progress: Any) -> None:
        self.step, self.total = progress.step, progress.total_steps
        self.history.append([progress.step, round(float(progress.loss), 6)])
        if time.monotonic() - self.last_write >= self.every or self.step == self.total:
            self.flush()

    def flush(self) -> None:
        self.last_write = time.monotonic()
        TrainingRun.objects.filter(pk=self.run.pk, status=RunStatus.RUNNING).update(
            step=self.step,
            total_steps=self.total,
            loss_history=self.history,
            updated_at=timezone.now(),
        )

    def should_stop(self) -> bool:
        if time.monotonic() - self.last_check < 1.0:
            return self.cancelled
        self.last_check = time.monotonic()
        status = TrainingRun.objects.filter(pk=self.run.pk).values_list("status", flat=True)
        self.cancelled = status.first() != RunStatus.RUNNING
        return self.cancelled


@dataclass(eq=False)
class EvalTracker:
    """Early stopping's evaluator for a run: ``measure``'s metrics (the eval split's, or the
    held-back pseudo-pairs') at every evaluation, ``metric`` the one compared, written to
    ``TrainingRun.evaluations`` as they come, for the run page and the API."""

    run: TrainingRun
    before: dict[str, float]
    reporter: Reporter  # its step is the step just taken when fit evaluates
    measure: Callable[[Any], dict[str, float]]
    metric: str
    measured: dict[int, dict[str, float]] = field(default_factory=dict)
    vectors: dict[int, Any] = field(default_factory=dict)  # step -> its metrics' VectorCache
    history: list[list[float]] = field(default_factory=list)

    def __call__(self, encoder: Any) -> float:
        # torch: only in the worker, where fit calls this
        from ..encoder.metrics import VectorCache

        step = int(self.reporter.step)
        if self.measured:
            # The vectors of each checkpoint are kept: the one fit keeps is measured again
            # (hybrid figures) with the very vectors its metric came from, not encoded twice.
            cache = self.vectors[step] = VectorCache(encoder)
            metrics = self.measure(cache)
        else:
            metrics = dict(self.before)  # step 0 is the base model, measured just before
        self.measured[step] = metrics
        self.history.append([step, float(metrics[self.metric])])
        best = max(self.history, key=lambda item: item[1])  # the first of equals: fit's choice
        self._write({"best_step": best[0], "best_metric": best[1]})
        return float(metrics[self.metric])

    def finish(self, result: Any) -> None:
        self._write(
            {
                "best_step": result.best_step,
                "best_metric": result.best_metric,
                "steps": result.steps,
                "total_steps": result.total_steps,
                "stopped_early": result.stopped_early,
                "min_steps": result.min_steps,
            }
        )

    def _write(self, extra: dict[str, Any]) -> None:
        TrainingRun.objects.filter(pk=self.run.pk).update(
            evaluations={"metric": self.metric, "history": self.history, **extra},
            updated_at=timezone.now(),
        )
