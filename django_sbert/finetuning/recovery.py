"""Find fine-tuning work that waits for a message nobody will deliver, or for a dead worker.

A training run is queued, and a version marked promoting, in the database first; the task
message is published after COMMIT. When the message is lost (a broker restarted without
persistence, a purge) or the worker running it dies, the database row would wait for ever:
a queued run holds the encoder's one-run slot, a promoting version turns off the serving
version's cache and doubles indexing work. Every sweep therefore calls, through
``tasks.recover_after_sweep``::

    fail_dead_runs()        # running, silent for TRAINING["STALLED_SECONDS"]: failed
    lost_runs()             # queued, untouched that long: claimed for re-sending
    lost_promotions()       # promoting, no progress that long: claimed for re-sending
                            # (at most PROMOTION_RESENDS times, then given up)

Re-sending is safe (only a queued run starts; a promotion resumes and switches once), and
claiming stamps the row, so concurrent sweeps send one message (docs/security.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..conf import sbert_settings
from ..models import EncoderVersion, RunStatus, TrainingRun, VersionStatus

DEAD_WORKER_ERROR = "The worker running this run stopped reporting (killed or lost)."
# A promotion that made no progress for STALLED_SECONDS is sent again this many times at most;
# then it is given up (back to candidate, with the error).
PROMOTION_RESENDS = 3


def stalled_before() -> datetime:
    """Rows that recorded nothing since this moment are stalled."""
    return timezone.now() - timedelta(seconds=float(sbert_settings.TRAINING["STALLED_SECONDS"]))


def fail_dead_runs(encoder_name: str | None = None) -> int:
    """Fail running runs that wrote no heartbeat since ``stalled_before()``; returns how many.

    Frees the one-run-per-encoder slot. The heartbeat is written during every phase of a run
    (``execution.execute_run``), so a healthy long run is never failed here.
    """
    runs = TrainingRun.objects.filter(status=RunStatus.RUNNING, updated_at__lt=stalled_before())
    if encoder_name is not None:
        runs = runs.filter(encoder_name=encoder_name)
    return runs.update(status=RunStatus.FAILED, error=DEAD_WORKER_ERROR, finished_at=timezone.now())


def lost_runs() -> list[int]:
    """Queued runs untouched since ``stalled_before()``, each claimed (stamped) for re-sending."""
    cutoff = stalled_before()
    stale = Q(updated_at__lt=cutoff) | Q(updated_at__isnull=True, created_at__lt=cutoff)
    claimed = []
    for pk in TrainingRun.objects.filter(stale, status=RunStatus.QUEUED).values_list(
        "pk", flat=True
    ):
        # One UPDATE per row with the condition repeated: a concurrent sweep claims none twice.
        if TrainingRun.objects.filter(stale, pk=pk, status=RunStatus.QUEUED).update(
            updated_at=timezone.now()
        ):
            claimed.append(pk)
    return claimed


def lost_promotions() -> list[int]:
    """Promoting versions with no progress since ``stalled_before()``, claimed for re-sending.

    Each is re-sent at most ``PROMOTION_RESENDS`` times (counted in
    ``promotion_request["resends"]``); after that it is given up (``give_up_promotion``): back
    to candidate with the error, so a promotion that fails on every worker (files that no host
    can fetch, a worker killed by it) is not sent for ever.
    """
    cutoff = stalled_before()
    stale = Q(promotion_updated_at__lt=cutoff) | Q(
        promotion_updated_at__isnull=True, created_at__lt=cutoff
    )
    most = PROMOTION_RESENDS
    claimed = []
    for pk in EncoderVersion.objects.filter(stale, status=VersionStatus.PROMOTING).values_list(
        "pk", flat=True
    ):
        with transaction.atomic():
            # Locked with the condition repeated: a concurrent sweep claims none twice.
            row = (
                EncoderVersion.objects.select_for_update()
                .filter(stale, pk=pk, status=VersionStatus.PROMOTING)
                .first()
            )
            if row is None:
                continue
            request = dict(row.promotion_request or {})
            resends = int(request.get("resends") or 0)
            if resends >= most:
                give_up_promotion(row, resends)
                continue
            request["resends"] = resends + 1
            EncoderVersion.objects.filter(pk=pk).update(
                promotion_updated_at=timezone.now(), promotion_request=request
            )
        claimed.append(pk)
    return claimed


def give_up_promotion(version: EncoderVersion, resends: int) -> None:
    """Stop a promotion re-sent ``resends`` times without progress: back to candidate (or
    retired) with why, keeping the last error a worker recorded."""
    last = version.promotion_error or "no worker recorded an error (lost or killed)"
    EncoderVersion.objects.filter(pk=version.pk, status=VersionStatus.PROMOTING).update(
        status=VersionStatus.RETIRED if version.activated_at else VersionStatus.CANDIDATE,
        promotion_error=(
            f"Given up: no progress after {resends} re-sends, "
            f"{sbert_settings.TRAINING['STALLED_SECONDS']} s apart. Last error: {last}"
        ),
        promotion_updated_at=timezone.now(),
    )
