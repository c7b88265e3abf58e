"""gunicorn configuration of the load test: the documented one (docs/deployment.md, "Web
processes under gunicorn").

``LOAD_WEB_WORKERS`` processes (default 2, one per core of the 2-core machine measured), each
a sync worker (one request at a time) whose torch gets its share of the CPUs; no preload: each
worker loads the model itself after the fork. ``django_sbert.contrib.gunicorn``'s hooks run the
system checks in the master and warm the query encoder in each worker before its first request.
``LOAD_WEB_THREADS`` > 1 switches to gthread workers with that many threads.
"""

import os

from django_sbert.contrib.gunicorn import on_starting, post_worker_init  # noqa: F401

wsgi_app = "benchmarks.load_site.wsgi:application"
bind = os.environ.get("LOAD_BIND", "127.0.0.1:8765")
workers = int(os.environ.get("LOAD_WEB_WORKERS", "2"))
threads = int(os.environ.get("LOAD_WEB_THREADS", "1"))
worker_class = "gthread" if threads > 1 else "sync"
timeout = 60  # loading and warming the encoder happen before a worker's first heartbeat
preload_app = False  # never: torch state inherited across fork() can hang
accesslog = None
