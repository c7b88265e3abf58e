"""Pairs -> run -> gate -> promotion -> switch: making the encoder fit the site, and serving it.

Modules, in the order a fine-tune goes: ``pairs`` (import and make training pairs), ``runs``
(validate, queue and execute a training run), ``gate`` (compare a candidate with the serving
version), ``promotion`` (stage every row's vectors, then switch in one transaction), ``tasks``
(the Celery tasks of runs and promotions), ``errors`` (stored errors: the traceback for
superusers, the message for other staff). docs/fine-tuning.md explains the workflow.
"""
