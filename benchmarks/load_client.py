"""The load test's search clients: one process, one thread, ``--clients`` connections in asyncio.

``benchmarks.load`` starts it for the load window and stops it with SIGTERM; it then writes
one record per search to ``--out`` (JSON: when it was sent, its kind, the HTTP status, seconds,
rows returned and the versions of the rows ranked by vector). A process of its own, so that the
clients neither share a GIL with the load test's writes and probes (whose waits would count as
search latency) nor cost more CPU than they must on the machine they measure: plain HTTP/1.1
over asyncio streams, no HTTP library, no thread per client.

    python -m benchmarks.load_client --port 8765 --clients 4 --queries q.json --pks pks.json \\
        --out searches.json [--mix text] [--order unique|random|zipf]

``--mix text`` sends text searches only (``benchmarks.throughput``). ``--order``: how texts are
drawn: ``random`` (the default: uniformly, with repetition), ``unique`` (each text of the file
once, in order, across all clients: no cache can carry a run) or ``zipf`` (the i-th text with
probability proportional to 1 / i^``--zipf-s``: head queries repeat, as on a real site).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import signal
import time
from pathlib import Path
from urllib.parse import quote

SEARCH_MIX = (("text", 0.5), ("similar", 0.2), ("hybrid", 0.3))

Record = tuple[float, str, int, float, int, list[str]]  # at, kind, status, seconds, rows, versions


MIXES = {"load": SEARCH_MIX, "text": (("text", 1.0),)}


class QueryStream:
    """The texts the clients send, drawn as ``--order`` says (shared by all clients)."""

    def __init__(self, queries: list[str], order: str, zipf_s: float) -> None:
        self.queries, self.order, self.next = queries, order, 0
        self.cumulative = list(
            itertools.accumulate(1 / (i + 1) ** zipf_s for i in range(len(queries)))
        )

    def draw(self, rng: random.Random) -> str:
        if self.order == "unique":
            text = self.queries[self.next % len(self.queries)]
            self.next += 1
            return text
        if self.order == "zipf":
            return rng.choices(self.queries, cum_weights=self.cumulative)[0]
        return rng.choice(self.queries)


def search_path(kind: str, rng: random.Random, queries: QueryStream, pks: list[int]) -> str:
    if kind == "similar":
        return f"/api/sbert/similar/testapp.article/{rng.choice(pks)}/?k=10"
    mode = "&mode=hybrid" if kind == "hybrid" else ""
    return f"/api/sbert/search/?model=testapp.article&k=10{mode}&q={quote(queries.draw(rng))}"


def versions_of(body: bytes) -> tuple[int, list[str]]:
    """Rows in an answer, and the versions of those ranked by vector: rows found by their words
    alone in a hybrid search (similarity null) may carry another version."""
    results = json.loads(body)["results"]
    compared = {
        r["object"]["embedding_version"] for r in results if r.get("similarity") is not None
    }
    return len(results), sorted(compared)


async def get(host: str, port: int, path: str, conn: list) -> tuple[int, bytes]:
    """One GET on the client's connection (``conn``: [reader, writer] or empty), reconnecting
    when the server closed it (gunicorn's sync workers close after every response)."""
    if not conn:
        conn.extend(await asyncio.open_connection(host, port))
    reader, writer = conn
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
    }
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    if headers.get("connection", "").lower() == "close":
        writer.close()
        conn.clear()
    return status, body


async def client(seed: int, args: argparse.Namespace, queries: QueryStream, pks: list[int],
                 stop: asyncio.Event, records: list[Record]) -> None:  # fmt: skip
    rng = random.Random(seed)
    kinds, weights = zip(*MIXES[args.mix], strict=True)
    conn: list = []
    while not stop.is_set():
        kind = rng.choices(kinds, weights)[0]
        path = search_path(kind, rng, queries, pks)
        at, started = time.time(), time.perf_counter()
        try:
            status, body = await get(args.host, args.port, path, conn)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            if conn:
                conn[1].close()
                conn.clear()
            status, body = 0, b""
            await asyncio.sleep(0.01)  # the server is away: do not spin
        seconds = time.perf_counter() - started
        rows, versions = versions_of(body) if status == 200 else (0, [])
        records.append((at, kind, status, seconds, rows, versions))


async def main_async(args: argparse.Namespace) -> list[Record]:
    queries = QueryStream(json.loads(args.queries.read_text()), args.order, args.zipf_s)
    pks = json.loads(args.pks.read_text())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    records: list[Record] = []
    await asyncio.gather(
        *(client(i, args, queries, pks, stop, records) for i in range(args.clients))
    )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections")
    parser.add_argument("--queries", type=Path, required=True, help="JSON list of query texts")
    parser.add_argument("--pks", type=Path, required=True, help="JSON list of row pks")
    parser.add_argument("--out", type=Path, required=True, help="where the records go (JSON)")
    parser.add_argument("--mix", choices=sorted(MIXES), default="load", help="kinds of search")
    parser.add_argument("--order", choices=["random", "unique", "zipf"], default="random")
    parser.add_argument("--zipf-s", type=float, default=1.0, help="the Zipf exponent")
    args = parser.parse_args()
    records = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(records))


if __name__ == "__main__":
    main()
