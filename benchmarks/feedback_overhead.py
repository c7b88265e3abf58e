"""What the search log costs: added latency per search, and click events per second.

1. In one process (Django's WSGI handler called as a server calls it, no network), the REST
   search (``GET /api/sbert/search/``, k=10, all-MiniLM-L6-v2) over ``--rows`` SciFact
   abstracts: each of ``--queries`` texts with ``SBERT["FEEDBACK"]["LOG"]`` off and on back to
   back (alternating which goes first), ``--rounds`` times: each setting's p50 until the body
   is out, and the median of the paired differences, also counting the response's
   ``close()`` (where the log's INSERT runs, after the answer). The texts are encoded once
   before (the query cache), so the difference is not hidden under encoding time.
2. ``log_search()`` called from Python on the same 10 rows, off (its first line returns) and
   on (one INSERT): p50 per call.
3. gunicorn (2 sync workers, ``tests/web_app/gunicorn.conf.py``, persistent database
   connections) answering ``POST /sbert/click/`` (form-encoded, as ``clicks.js`` sends it)
   from ``--clients`` threads for ``--seconds``, each event for a distinct result of a logged
   search: events/s and p50/p99, alone, with ``--search-clients`` threads searching as fast
   as the server answers (searches take the CPU and the processes), and with them paced to
   ``--search-rate`` searches/s in all. Every answer must be 202 and every event stored.

The rows' vectors are random unit vectors stamped with the serving version, as in
``benchmarks.connections``: a search's cost does not depend on their values.

    flock /tmp/sbert-bench.lock .venv/bin/python -m benchmarks.feedback_overhead [--json PATH]
    python -m benchmarks.feedback_overhead --rows 1000 --rounds 2 --seconds 5   # a quick look
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlencode

from benchmarks.common import ROOT, add_json_option, cpu_line, load_average, p50_p99, write_json
from benchmarks.connections import free_port, load_corpus

SETTINGS = "benchmarks._feedback_settings"


def setup(rows: int) -> list[str]:
    """Django on this module's settings, the rows inserted; the query texts."""
    from benchmarks.django_setup import embedded_database_url

    embedded_database_url()
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    os.environ["BENCH_CONNECTIONS"] = "persistent"
    import django

    django.setup()
    from benchmarks import connections

    corpus, claims = load_corpus(rows)
    connections.SETTINGS = SETTINGS  # prepare_database sets up Django with it (done already)
    connections.prepare_database(corpus)
    return claims


def set_log(on: bool) -> None:
    """``SBERT["FEEDBACK"]["LOG"]`` on or off, without ``setting_changed``: the other
    receivers of a change of ``SBERT`` drop the serving caches, which would time something
    else than the log."""
    from django.conf import settings

    from django_sbert.conf import sbert_settings

    settings.SBERT["FEEDBACK"]["LOG"] = on
    sbert_settings.reload()


def rest_overhead(queries: list[str], rounds: int) -> dict[str, float]:
    """The REST search's p50 (ms), log off and on, and the median of the paired differences:
    each query is searched off and on back to back (in alternating order). Through Django's
    WSGI handler as a server calls it: the answer is timed until its body is out (what the
    visitor waits for), and ``whole`` also counts the response's ``close()``, where the log's
    INSERT runs after the body is sent (what the process spends)."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.test.client import RequestFactory

    handler, factory = WSGIHandler(), RequestFactory()
    environs = [
        factory.get("/api/sbert/search/", {"model": "testapp.article", "q": q, "k": 10}).environ
        for q in queries
    ]

    def search(environ: dict) -> tuple[float, float, bytes]:
        statuses: list[str] = []
        started = time.perf_counter()
        response = handler(dict(environ), lambda status, headers: statuses.append(status))
        body = b"".join(response)
        answered = time.perf_counter()
        response.close()
        assert statuses[0].startswith("200"), body[:300]
        return (answered - started) * 1000, (time.perf_counter() - started) * 1000, body

    for environ in environs:  # encode every text once: the query cache holds them from now on
        search(environ)
    times: dict[bool, list[float]] = {False: [], True: []}
    whole: dict[bool, list[float]] = {False: [], True: []}
    differences, whole_differences = [], []
    for round_number in range(rounds):
        for n, environ in enumerate(environs):
            pair, pair_whole = {}, {}
            for on in (False, True) if (n + round_number) % 2 else (True, False):
                set_log(on)
                pair[on], pair_whole[on], body = search(environ)
                assert (b'"search_id"' in body) == on
                times[on].append(pair[on])
                whole[on].append(pair_whole[on])
            differences.append(pair[True] - pair[False])
            whole_differences.append(pair_whole[True] - pair_whole[False])
    set_log(True)
    return {
        "off": statistics.median(times[False]),
        "on": statistics.median(times[True]),
        "added": statistics.median(differences),
        "whole_added": statistics.median(whole_differences),
    }


def python_overhead(query: str, calls: int, rounds: int) -> dict[str, float]:
    """Median over rounds of ``log_search()``'s p50 (ms per call), log off and on."""
    from django.test import RequestFactory

    from benchmarks.django_setup import article_model
    from django_sbert.feedback import log_search

    hits = list(article_model().objects.similar_to(query)[:10])
    request = RequestFactory().get("/search/")
    p50s: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(rounds):
        for name, on in (("off", False), ("on", True)):
            times = []
            set_log(on)
            for _ in range(calls):
                started = time.perf_counter()
                entry = log_search(request, hits, query=query, mode="vector")
                times.append((time.perf_counter() - started) * 1000)
                assert (entry is not None) == on
            p50s[name].append(statistics.median(times))
    set_log(True)
    return {name: statistics.median(values) for name, values in p50s.items()}


def make_tokens(queries: list[str], searches: int) -> list[str]:
    """Click tokens of ``searches`` logged searches (10 results each)."""
    from django.test import RequestFactory

    from benchmarks.django_setup import article_model
    from django_sbert.feedback import log_search

    Article = article_model()
    request = RequestFactory().get("/search/")
    pks = list(Article.objects.values_list("pk", flat=True))
    tokens: list[str] = []
    for n in range(searches):
        hits = list(Article.objects.filter(pk__in=pks[n % 50 :: 50][:10]))
        entry = log_search(request, hits, query=queries[n % len(queries)], mode="vector")
        tokens.extend(entry.click_tokens)
    return tokens


def start_gunicorn(workers: int, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "BENCH_CONNECTIONS": "persistent"}
    command = [
        sys.executable, "-m", "gunicorn", "-c", "tests/web_app/gunicorn.conf.py",
        "-b", f"127.0.0.1:{port}", "-w", str(workers),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 300
    while log.read_text(errors="replace").count("web process warmed") < workers:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"gunicorn did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return process, port


def request(port: int, method: str, path: str, body: str | None = None) -> int:
    connection = HTTPConnection("127.0.0.1", port, timeout=30)  # sync workers close it
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status


def drive(
    port: int,
    tokens: list[str],
    queries: list[str],
    clients: int,
    searchers: int,
    seconds: float,
    search_rate: float = 0.0,
) -> dict[str, object]:
    """Events from ``clients`` threads (and searches from ``searchers``) for ``seconds``;
    ``search_rate``: searches per second in all, paced (0: each searcher as fast as it can)."""
    lock = threading.Lock()
    event_times: list[float] = []
    statuses: dict[int, int] = {}
    searches = [0]
    deadline = time.monotonic() + seconds
    queue = iter(tokens)

    def clicker() -> None:
        while time.monotonic() < deadline:
            with lock:
                token = next(queue, None)
            if token is None:
                return
            started = time.perf_counter()
            status = request(port, "POST", "/sbert/click/", urlencode({"token": token}))
            with lock:
                event_times.append((time.perf_counter() - started) * 1000)
                statuses[status] = statuses.get(status, 0) + 1

    def searcher(offset: int) -> None:
        i = offset
        interval = searchers / search_rate if search_rate else 0.0
        next_at = time.monotonic() + interval * offset / max(searchers, 1)
        while time.monotonic() < deadline:
            if interval:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += interval
            query = urlencode({"model": "testapp.article", "q": queries[i % len(queries)]})
            i += 7
            if request(port, "GET", f"/api/sbert/search/?{query}") == 200:
                with lock:
                    searches[0] += 1

    threads = [threading.Thread(target=clicker) for _ in range(clients)]
    threads += [threading.Thread(target=searcher, args=(n,)) for n in range(searchers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    p50, p99 = p50_p99(event_times)
    return {
        "events_per_s": len(event_times) / elapsed,
        "event_p50_ms": p50,
        "event_p99_ms": p99,
        "searches_per_s": searches[0] / elapsed,
        "statuses": statuses,
        "events": len(event_times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5183)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="log_search() calls per round")
    parser.add_argument("--clients", type=int, default=8, help="threads posting events")
    parser.add_argument("--search-clients", type=int, default=2)
    parser.add_argument(
        "--search-rate",
        type=float,
        default=20.0,
        help="searches/s of a third run beside the events, paced (0: leave that run out)",
    )
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn processes")
    add_json_option(parser)
    args = parser.parse_args()

    print(cpu_line())
    print(f"load average at start: {load_average()}")
    claims = setup(args.rows)
    queries = claims[: args.queries]
    figures: dict[str, object] = {"cpu": cpu_line()}

    rest = rest_overhead(queries, args.rounds)
    figures["rest_p50_ms"] = rest
    print(
        f"REST search p50 ({args.rounds} rounds x {len(queries)} queries, off and on back to "
        f"back): log off {rest['off']:.2f} ms, on {rest['on']:.2f} ms; median added "
        f"{rest['added']:+.2f} ms to the answer, {rest['whole_added']:+.2f} ms with the write "
        "after it"
    )
    python = python_overhead(queries[0], args.calls, args.rounds)
    figures["log_search_p50_ms"] = python
    print(
        f"log_search() p50 per call: off {python['off'] * 1000:.1f} us, "
        f"on {python['on']:.2f} ms (one INSERT)"
    )

    from django.db import connections

    from django_sbert.models import SearchEvent

    needed = int(args.seconds * 2400) + 1500  # more than 3 x 800 events/s could use
    tokens = make_tokens(claims, needed // 10 + 1)
    SearchEvent.objects.all().delete()
    connections.close_all()
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"sbert-bench-feedback-{os.getpid()}"
    logs.mkdir(exist_ok=True)
    process, port = start_gunicorn(args.workers, logs / "gunicorn.log")
    try:
        for _ in range(3):  # the first searches of each process
            request(port, "GET", "/api/sbert/search/?" + urlencode(
                {"model": "testapp.article", "q": queries[0]}))  # fmt: skip
        third = len(tokens) // 3
        runs = {
            "alone": drive(port, tokens[:third], claims, args.clients, 0, args.seconds),
            "with_searches": drive(
                port,
                tokens[third : 2 * third],
                claims,
                args.clients,
                args.search_clients,
                args.seconds,
            ),
        }
        if args.search_rate:
            runs[f"with_{args.search_rate:g}_searches_per_s"] = drive(
                port,
                tokens[2 * third :],
                claims,
                args.clients,
                args.search_clients,
                args.seconds,
                search_rate=args.search_rate,
            )
    finally:
        process.terminate()
        process.wait(timeout=60)
    stored = SearchEvent.objects.count()
    figures["events"] = runs
    for name, run in runs.items():
        print(
            f"POST sbert/click/ {name:>26}: {run['events_per_s']:.0f} events/s, "
            f"p50 {run['event_p50_ms']:.1f} ms, p99 {run['event_p99_ms']:.1f} ms"
            + (f", {run['searches_per_s']:.1f} searches/s beside" if run["searches_per_s"] else "")
            + f"  (answers: {run['statuses']})"
        )
    sent = sum(int(run["events"]) for run in runs.values())
    print(f"events stored: {stored} of {sent} sent")
    print(f"load average at end: {load_average()}")
    if stored != sent or any(set(run["statuses"]) != {202} for run in runs.values()):
        raise SystemExit("some events were not accepted or not stored")
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
