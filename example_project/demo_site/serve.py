"""The demo's web process: the query encoder warmed first, then ``runserver`` on its port.

    python -m demo_site.serve 127.0.0.1:8000      (from example_project/, as demo.py runs it)

``runserver`` has no start-up hook, and its first search would load the model and build the
compiled query graph (tens of seconds on a new host) while a visitor waits. Here the process
runs ``prepare_web_process`` (what gunicorn's ``post_worker_init`` hook does in
``gunicorn.conf.py``): the graph is loaded from this host's compile cache, or built and stored
there, before the port opens. It prints "query encoder ready" when done.
"""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    import django
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    from django_sbert.serving.web import prepare_web_process

    started = time.monotonic()
    states = prepare_web_process()  # one web process: torch gets the CPUs it is given
    connections.close_all()  # runserver's request threads open their own
    for name, state in states.items():
        if state.error:
            print(f"query encoder {name!r} failed to warm: {state.error}", flush=True)
        else:
            print(
                f"query encoder ready: {name!r} version {state.version}, {state.path}, "
                f"{time.monotonic() - started:.1f} s",
                flush=True,
            )
    call_command("runserver", *argv, use_reloader=False)


if __name__ == "__main__":
    main(sys.argv[1:])
