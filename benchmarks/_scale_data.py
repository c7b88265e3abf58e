"""The 1M-row corpus of benchmarks/scale.py: real MiniLM vectors, filled up honestly.

* Distinct sentences (25-400 characters) of ../shared/data (Wikinews titles and sentences,
  SciFact titles and abstract sentences, STSb train and dev sentences): about 143k texts,
  encoded for real with all-MiniLM-L6-v2 (through ``torch.compile``, float32, the same vectors
  as eager mode) in resumable 5,000-text chunks; ``--no-encode`` uses the chunks already
  cached (a prefix of the texts) and fills the rest. The last 1,000 distinct texts are never
  rows: they are the "held-out sentences" queries, news and science sentences like the rows.
* The rest up to the row count: real vectors with a small perturbation. Row ``i`` beyond the
  real ones is ``normalize(v[i % n_real] + sigma * g_i)`` with ``g_i`` a standard normal
  vector (a fixed seed) and ``sigma = 0.02`` per dimension, so a filler row's cosine to its
  source is about 0.93 (printed by the benchmark). Each filler is its own point: the index must
  tell apart several near copies of every real sentence, harder than distinct texts, not easier.

Vectors are cached outside the repository (``--cache``, default ``/work/cache15``): never
committed, reused by every later run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
from _data import corpus_texts

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("SBERT_DATA_DIR", ROOT.parent / "shared" / "data"))
MODEL = "all-MiniLM-L6-v2"
CHUNK = 5_000
SIGMA = 0.02  # per-dimension noise of a filler row (unit vectors of 384 dims: ~0.93 cosine)
HELD_OUT = 1_000  # the last distinct texts: never rows, queries "like the rows"


def distinct_texts() -> list[str]:
    """Distinct sentences (25-400 chars) of Wikinews, SciFact's corpus and STSb, file order."""
    seen: dict[str, None] = {}

    def add(text: str) -> None:
        text = " ".join(text.split())
        if 25 <= len(text) <= 400:
            seen.setdefault(text)

    for text in corpus_texts(DATA):
        add(text)
    for name in ("sts-train.csv", "sts-dev.csv"):
        for line in (DATA / "stsbenchmark" / name).read_text(encoding="utf-8").splitlines():
            columns = line.split("\t")
            if len(columns) >= 7:
                add(columns[5])
                add(columns[6])
    return list(seen)


def held_out_texts(n: int) -> list[str]:
    """Distinct sentences of the data that are never rows of the table (the last ``HELD_OUT``)."""
    return distinct_texts()[-HELD_OUT:][:n]


def query_texts(n: int) -> list[str]:
    """SciFact training claims: questions about the abstracts, not rows of the table."""
    lines = (DATA / "scifact" / "queries-train.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines[:n]]


def real_vectors(
    texts: list[str], cache: Path, threads: int, encode_missing: bool = True
) -> np.ndarray:
    """MiniLM vectors of ``texts``, encoded in resumable chunks cached under ``cache``; with
    ``encode_missing=False``, only those of the chunks already cached (a prefix of ``texts``)."""
    from django_sbert.encoder import SentenceEncoder, resolve_model_path
    from django_sbert.encoder.fingerprint import model_fingerprint

    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
    key += "-" + model_fingerprint(resolve_model_path(MODEL))[:8]
    folder = cache / f"real-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    encoder = None
    parts = []
    for start in range(0, len(texts), CHUNK):
        path = folder / f"part-{start:07d}.npy"
        if not path.exists() and not encode_missing:
            break
        if not path.exists():
            if encoder is None:
                encoder = SentenceEncoder.load(MODEL, device="cpu", threads=threads, compile=True)
            t0 = time.perf_counter()
            vectors = encoder.encode(texts[start : start + CHUNK], batch_size=64, normalize=True)
            np.save(path.with_suffix(".tmp.npy"), vectors.astype(np.float32))
            path.with_suffix(".tmp.npy").rename(path)  # a half-written chunk is never read
            rate = len(vectors) / (time.perf_counter() - t0)
            print(f"  encoded {start + len(vectors)}/{len(texts)} ({rate:.0f} sentences/s)")
        parts.append(np.load(path))
    return np.concatenate(parts)


def corpus(
    rows: int, cache: Path, threads: int = 2, encode_missing: bool = True
) -> tuple[np.ndarray, list[str], int]:
    """``rows`` unit vectors (float32), their texts, and how many of them are real encodings
    (with ``encode_missing=False``: as many as are cached; the rest are fillers)."""
    texts = distinct_texts()
    real = real_vectors(texts, cache, threads, encode_missing)[: len(texts) - HELD_OUT]
    texts = texts[: len(real)]
    if rows <= len(real):
        return real[:rows], texts[:rows], rows
    path = cache / f"filled-{len(real)}-{rows}-{SIGMA}.npy"
    if not path.exists():
        rng = np.random.default_rng(15)
        out = np.empty((rows, real.shape[1]), dtype=np.float32)
        out[: len(real)] = real
        for start in range(len(real), rows, 100_000):
            stop = min(rows, start + 100_000)
            base = real[np.arange(start, stop) % len(real)]
            noisy = base + SIGMA * rng.standard_normal(base.shape, dtype=np.float32)
            out[start:stop] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        np.save(path.with_suffix(".tmp.npy"), out)
        path.with_suffix(".tmp.npy").rename(path)
    vectors = np.load(path, mmap_mode="r")
    all_texts = [texts[i % len(texts)] for i in range(rows)]
    return vectors, all_texts, len(real)
