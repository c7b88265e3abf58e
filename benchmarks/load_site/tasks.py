"""The probe as a task: each worker of the load test also consumes a queue of its own."""

from __future__ import annotations

from celery import shared_task

from .probe import probe as _probe


@shared_task(name="load_site.probe", ignore_result=False)
def probe() -> dict[str, object]:
    return _probe()
