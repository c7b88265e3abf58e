"""``gunicorn -c gunicorn.conf.py`` from example_project/: the web processes of the demo site.

Each worker process loads and warms the query encoder before its first request and gives torch
its share of the CPUs (``django_sbert.contrib.gunicorn``); the master runs the system checks,
``django_sbert.E012`` included, before forking. ``WEB_CONCURRENCY`` sets the processes (one
per CPU core is a good start: a search is a few milliseconds of CPU), ``BIND`` the address.
"""

import os

from django_sbert.contrib.gunicorn import on_starting, post_worker_init  # noqa: F401

wsgi_app = "demo_site.wsgi:application"
bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "sync"  # one request at a time per process: torch uses the process's threads
timeout = 60  # loading and warming the encoder happen before a worker's first heartbeat
preload_app = False  # never: torch state inherited across fork() can hang (docs/deployment.md)
