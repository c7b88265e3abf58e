"""``manage.py sbert_query_server``: this host's query encoder, shared by its web processes.

::

    manage.py sbert_query_server                     # on SBERT["QUERY_SERVER"]["SOCKET"]
    manage.py sbert_query_server --socket /run/sbert/query.sock --threads 2 --concurrency 2
    manage.py sbert_query_server --stats             # the running server's counters, as JSON
    manage.py sbert_query_server --stats --clear     # ... then empty its cache, zero them

It loads and warms the serving version of every encoder an ``EmbeddingField`` uses, starts
the version watcher, then listens ("ready" once it accepts connections); while it is stopped,
web processes answer searches from the keyword side (``SOCKET`` a path: they load no model), or
encode them themselves (``[path, "in-process"]``; docs/deployment.md, "One query encoder per
host").
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.conf import sbert_settings
from django_sbert.serving import query_client
from django_sbert.serving.cache import encode_queries
from django_sbert.serving.query_server import QueryServer, server_stats
from django_sbert.serving.warmup import warm
from django_sbert.serving.web import served_encoders, start_watcher
from django_sbert.serving.worker import set_torch_threads


class Command(BaseCommand):
    help = "Encode the search queries of this host's web processes, with one cache."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--socket", help="Unix socket path (default: QUERY_SERVER SOCKET).")
        parser.add_argument(
            "--threads",
            type=int,
            help="torch threads of the process (default: every CPU); each query is encoded "
            "alone on one, as a web process encodes it",
        )
        parser.add_argument(
            "--max-batch", type=int, default=16, help="Queries taken at once (each encoded alone)."
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            help="Queries encoded at the same time, each on its own thread (default: every "
            "CPU). ONNX Runtime's graphs run them side by side; torch's passes take turns",
        )
        parser.add_argument(
            "--window-ms",
            type=float,
            default=0.0,
            help="Milliseconds a query waits for others to join its batch. Each text is "
            "encoded alone, so waiting buys nothing but fewer hand-offs to the encoding threads",
        )
        parser.add_argument(
            "--max-queue",
            type=int,
            default=64,
            help="Queries waiting at most; past it a search gets 503 with Retry-After.",
        )
        parser.add_argument(
            "--retry-after",
            type=int,
            default=1,
            help="Seconds in the Retry-After of a search refused because the server was busy.",
        )
        parser.add_argument(
            "--cache-size",
            type=int,
            default=10000,
            help="Query vectors kept for every process of the host (LRU; 0: none).",
        )
        parser.add_argument(
            "--stats", action="store_true", help="Print the running server's counters and exit."
        )
        parser.add_argument(
            "--clear",
            action="store_true",
            help="With --stats: then empty the running server's cache and zero its counters.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = sbert_settings.QUERY_SERVER
        path = options["socket"] or config["SOCKET"]
        if not path:
            raise CommandError(
                'No socket: set SBERT["QUERY_SERVER"]["SOCKET"] (the web processes read it '
                "too) or pass --socket."
            )
        if options["clear"] and not options["stats"]:
            raise CommandError("--clear goes with --stats.")
        if options["stats"]:
            try:
                stats = server_stats(path, clear=options["clear"])
                self.stdout.write(json.dumps(stats, indent=1))
            except OSError as exc:
                raise CommandError(f"No query server answers on {path}: {exc}") from exc
            return
        if options["concurrency"] is not None and options["concurrency"] < 1:
            raise CommandError(f"--concurrency must be at least 1, got {options['concurrency']}.")
        self._serve(str(path), options["threads"], options)

    def _serve(self, path: str, threads: int | None, options: dict[str, Any]) -> None:
        import torch  # only where the server runs: --stats answers without loading it

        query_client.disable()  # this process encodes: it never asks a server itself
        threads = int(threads or os.cpu_count() or 1)
        concurrency = options["concurrency"] or int(os.cpu_count() or 1)
        set_torch_threads(threads)
        torch.set_num_threads(threads)
        names = served_encoders()
        states = warm(names, role="both")
        failed = {name: state.error for name, state in states.items() if state.error}
        if failed:
            raise CommandError(f"Could not warm {failed}; nothing listens.")
        start_watcher(names, role="both")
        server = QueryServer(
            path,
            encode_queries,
            max_batch=options["max_batch"],
            window_ms=options["window_ms"],
            max_queue=options["max_queue"],
            cache_size=options["cache_size"],
            retry_after=options["retry_after"],
            concurrency=concurrency,
        )
        paths = {name: state.path for name, state in states.items()}
        try:
            asyncio.run(self._run(server, names, threads, paths))
        except OSError as exc:
            raise CommandError(str(exc)) from exc

    async def _run(
        self, server: Any, names: list[str], threads: int, paths: dict[str, str]
    ) -> None:
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        task = asyncio.create_task(server.serve(ready))
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            self.stdout.write(
                f"Query server ready on {server.path}: encoders {names} ({paths}), "
                f"{threads} torch threads, {server.concurrency} queries at once, batches of "
                f"up to {server.max_batch}, window "
                f"{server.window * 1000:g} ms, queue {server.max_queue}, cache "
                f"{server.cache_size}.",
            )
            self.stdout.flush()
        waiting.cancel()
        try:
            await task
        except asyncio.CancelledError:
            self.stdout.write("Query server stopped.")
