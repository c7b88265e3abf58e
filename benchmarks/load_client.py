"""The load test's search clients: one process, one thread, ``--clients`` connections in asyncio.

``benchmarks.load`` starts it for the load window and stops it with SIGTERM; it then writes
one record per search to ``--out`` (JSON: when it was sent, its kind, the HTTP status, seconds,
rows returned and the versions of the rows ranked by vector). A process of its own, so that the
clients neither share a GIL with the load test's writes and probes (whose waits would count as
search latency) nor cost more CPU than they must on the machine they measure: plain HTTP/1.1
over asyncio streams, no HTTP library, no thread per client.

    python -m benchmarks.load_client --port 8765 --clients 4 --queries q.json --pks pks.json \\
        --out searches.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import time
from pathlib import Path
from urllib.parse import quote

SEARCH_MIX = (("text", 0.5), ("similar", 0.2), ("hybrid", 0.3))

Record = tuple[float, str, int, float, int, list[str]]  # at, kind, status, seconds, rows, versions


def search_path(kind: str, rng: random.Random, queries: list[str], pks: list[int]) -> str:
    if kind == "similar":
        return f"/api/sbert/similar/testapp.article/{rng.choice(pks)}/?k=10"
    mode = "&mode=hybrid" if kind == "hybrid" else ""
    return f"/api/sbert/search/?model=testapp.article&k=10{mode}&q={quote(rng.choice(queries))}"


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


async def client(seed: int, args: argparse.Namespace, queries: list[str], pks: list[int],
                 stop: asyncio.Event, records: list[Record]) -> None:  # fmt: skip
    rng = random.Random(seed)
    kinds, weights = zip(*SEARCH_MIX, strict=True)
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
    queries = json.loads(args.queries.read_text())
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
    args = parser.parse_args()
    records = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(records))


if __name__ == "__main__":
    main()
