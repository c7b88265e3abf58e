"""Pairs -> run -> gate -> promotion -> switch: making the encoder fit the site, and serving it.

Modules, in the order a fine-tune goes:

* ``pairs``: import training pairs, or make them from content.
* ``options``: the losses, their recipes, and the training options declared once (the admin
  form, the API and ``sbert_train`` are built from them); ``Hyperparameters``.
* ``runs``: create, queue and cancel a training run.
* ``examples``: pairs or a field's text -> what a loss trains on; mined hard negatives
  (``negatives``).
* ``execution``: the run in the worker: train, measure, save a candidate; ``progress``: what
  it writes while it runs; ``quality``: general quality on an STS file.
* ``gate``: compare a candidate with the serving version on the eval pairs (and, for a run
  from visitors' clicks, on the ``guard`` set no visitor writes; ``rows``: the encoder's rows
  both sample); ``hybrid``: the
  keyword and hybrid figures and the fusion chosen per version; ``compare``: the
  before-and-after page's results.
* ``promotion``: stage every row's vectors, then switch in one transaction; ``passages``: the
  same for passage tables.
* ``tasks``: the Celery tasks of runs and promotions; ``queues``: whether a worker consumes
  them; ``recovery``: lost and dead runs and promotions.
* ``errors``: stored errors: the traceback for superusers, the message for other staff.

docs/fine-tuning.md explains the workflow. The wing's public names (``__all__``) are
importable from here, e.g. ``from django_sbert.finetuning import create_run``.
They load on first use: the modules read the models, which importing this package (from the
app's checks, its tasks, a project's settings) must not. ``gate`` and ``compare`` are modules
here; their functions of the same names are ``gate.gate`` and ``compare.compare``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each public name and the module that defines it.
_HOMES = {
    "GateResult": "gate",
    "Hyperparameters": "options",
    "ImportReport": "pairs",
    "OPTIONS": "options",
    "RECIPES": "options",
    "RollbackForbidden": "promotion",
    "adapt_hyperparameters": "options",
    "cancel_promotion": "promotion",
    "cancel_run": "runs",
    "content_pairs": "pairs",
    "create_run": "runs",
    "default_loss": "examples",
    "execute_run": "execution",
    "import_pairs": "pairs",
    "rollback": "promotion",
    "start_promotion": "promotion",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Django's loading order: these modules read the models, so they load on first use.
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
