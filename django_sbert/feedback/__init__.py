"""Learning from visitors: the search log's analytics, pairs from behaviour, and the loop.

* ``analytics``: what people look for (top queries, no results, no click, click-through by
  position, mean reciprocal rank of the first click per day and version), counted by
  PostgreSQL.
* ``pairs``: (query, clicked row) training pairs with negatives from behaviour.
* ``loop``: make pairs, start a fine-tune when enough are new, promote a candidate the gate
  passes when ``SBERT["FEEDBACK"]["AUTO_PROMOTE"]``; ``learning_tasks`` runs it in Celery.

docs/learning.md explains the workflow.
"""
