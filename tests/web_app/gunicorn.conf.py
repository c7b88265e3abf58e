"""The gunicorn config of the tests: docs/deployment.md's, with the test site's WSGI module."""

from django_sbert.contrib.gunicorn import on_starting, post_worker_init  # noqa: F401

wsgi_app = "tests.web_app.wsgi:application"
workers = 2
timeout = 60
preload_app = False
# Several test servers run at once on one machine: no shared control socket (gunicorn 27+).
control_socket_disable = True
