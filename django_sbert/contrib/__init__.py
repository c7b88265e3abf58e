"""Glue for the servers and tools a site runs django-sbert under (``contrib.gunicorn``,
``contrib.asgi`` for uvicorn, ``contrib.wagtail``)."""
