"""Judgment lists -> evaluations: how good a site's search is, measured and kept over time.

Modules: ``judgments`` (build a judgment list: import CSV, JSON Lines or TREC qrels, or take
the eval pairs), ``run`` (measure a list with an encoder version and the search modes, and
store the evaluation), ``tasks`` (the ``evaluate_lists`` Celery task).

The metrics themselves are ``django_sbert.encoder.metrics.ranking_metrics``, shared with
the gate and the before-and-after page. The wing's public names are importable from here
(``__all__``), each the one its module defines::

    from django_sbert.evaluation import evaluate, from_eval_pairs

They load on first use: the modules read the models, which importing this package (from the
app's ``ready()``, its tasks) must not.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "JudgmentsReport",
    "enqueue_evaluation",
    "evaluate",
    "evaluate_lists",
    "from_eval_pairs",
    "import_csv",
    "import_file",
    "import_jsonl",
    "import_trec_qrels",
    "relevance",
    "similarity_threshold",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Django's loading order: these modules read the models, so they load on first use.
    from . import judgments, run, tasks

    homes = {"evaluate": run, "similarity_threshold": run}
    homes.update(dict.fromkeys(("enqueue_evaluation", "evaluate_lists"), tasks))
    return getattr(homes.get(name, judgments), name)
