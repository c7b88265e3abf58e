"""A task that answers what torch runs with in the worker process that executes it.

Imported by worker subprocesses of tests/serving/test_worker_threads.py (``CELERY_IMPORTS`` in
``tests.serving.threads_worker_settings``).
"""

from __future__ import annotations

import os
import time

from tests.celery_app import app


@app.task(name="tests.serving.torch_threads")
def torch_threads_in_this_process(hold: float = 0.0) -> dict[str, int]:
    """This process's id and ``torch.get_num_threads()``; ``hold`` keeps it busy that long, so
    that tasks sent together reach different pool processes."""
    import torch  # loaded by the worker's warm-up already

    time.sleep(hold)
    return {"pid": os.getpid(), "threads": torch.get_num_threads()}
