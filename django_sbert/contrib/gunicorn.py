"""Gunicorn hooks: system checks before the first worker forks, encoders warmed in each worker.

In the site's ``gunicorn.conf.py`` (docs/deployment.md)::

    from django_sbert.contrib.gunicorn import on_starting, post_worker_init  # noqa: F401

    wsgi_app = "proj.wsgi"
    workers = 2          # processes; each loads its own encoder (no preload_app: see below)
    timeout = 60         # loading and warming happen before a worker's first heartbeat

``on_starting`` (the master, once) runs the system checks with the database ones, so a host
that cannot serve refuses to start with the reason, and closes its connections before any
worker forks; ``post_worker_init`` (each worker) gives torch its share of the CPUs, warms the
query encoders and starts the version watcher before the worker takes requests. Do not set
``preload_app = True``: torch state inherited across ``fork()`` can hang or oversubscribe
cores (docs/deployment.md, "Web processes under gunicorn").
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def on_starting(server: Any) -> None:
    """Run the system checks, database checks included, in the master before forking."""
    # gunicorn imports this module with its config, before Django is set up
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    try:
        # Raises SystemCheckError (listing every error) when a check fails: gunicorn stops.
        call_command("check", databases=list(settings.DATABASES))
    finally:
        # A forked worker must not share the master's sockets, nor inherit a psycopg pool
        # (OPTIONS["pool"]) whose maintenance threads do not exist after fork(): a worker's
        # request would wait for a connection for ever.
        for connection in connections.all(initialized_only=True):
            connection.close()
            close_pool = getattr(connection, "close_pool", None)  # Django 5.1+, PostgreSQL
            if close_pool is not None:
                close_pool()


def post_worker_init(worker: Any) -> None:
    """Warm this worker's encoders before it accepts a request."""
    # needs Django's apps loaded, which the worker did just before this hook
    from django_sbert.serving.web import prepare_web_process

    prepare_web_process(processes=int(getattr(worker.cfg, "workers", 1) or 1))
