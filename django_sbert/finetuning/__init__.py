"""Pairs -> run -> gate -> promotion -> switch: making the encoder fit the site, and serving it.

Modules, in the order a fine-tune goes:

* ``pairs``: import training pairs, or make them from content.
* ``options``: the losses, their recipes, and the training options declared once (the admin
  form, the API and ``sbert_train`` are built from them); ``Hyperparameters``.
* ``runs``: create, queue and cancel a training run (its names of the other run modules too).
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

docs/fine-tuning.md explains the workflow.
"""
