"""ASGI servers (uvicorn): encoders warmed at the lifespan start-up, before the first request.

Django's ASGI handler refuses the ``lifespan`` scope, so a server has no moment to warm the
query encoder before it takes requests. Wrap the application in the site's ``asgi.py``::

    from django.core.asgi import get_asgi_application
    from django_sbert.contrib.asgi import warm_on_startup

    application = warm_on_startup(get_asgi_application())

Each worker process runs ``serving.web.prepare_web_process`` at the lifespan start-up and
serves only after it (docs/deployment.md). ``processes`` is the number of worker processes
sharing the CPUs (default ``WEB_CONCURRENCY``, which ``uvicorn --workers`` also defaults to,
else 1).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def warm_on_startup(application: ASGIApp, processes: int | None = None) -> ASGIApp:
    """``application`` with the ``lifespan`` scope answered: warm at start-up, nothing at
    shutdown; every other scope goes to ``application``."""
    count = processes or int(os.environ.get("WEB_CONCURRENCY") or 1)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await application(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    # Loading and compiling block: off the event loop, which has nothing
                    # else to do yet but must stay responsive to the server.
                    await asyncio.to_thread(_prepare, count)
                except Exception as exc:  # settings or import errors: the server stops
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    return app


def _prepare(processes: int) -> None:
    # needs Django's apps loaded, which get_asgi_application() did
    from django.db import connections

    from django_sbert.serving.web import prepare_web_process  # models: after apps load

    try:
        prepare_web_process(processes=processes)
    finally:
        connections.close_all()  # this thread's connections: no request will close them
