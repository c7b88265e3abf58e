"""Judgment lists -> evaluations: how good a site's search is, measured and kept over time.

Modules:

* ``judgments``: build a judgment list: import CSV, JSON Lines or TREC qrels (with a mapping
  from document ids to rows), or take the eval pairs (each pair's text_b matched to its row).
* ``run``: measure a judgment list with an encoder version and the search modes, and store
  the evaluation.
* ``tasks``: the ``evaluate_lists`` Celery task, queued after each promotion and by a beat
  entry (quality over time).

The metrics themselves are ``django_sbert.encoder.evaluation.ranking_metrics``, shared with
the gate and the before-and-after page.
"""
