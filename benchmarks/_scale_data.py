"""The 1M-row corpus of ``benchmarks.scale``: real MiniLM vectors, filled up honestly.

* Distinct sentences (25-400 characters) of ../shared/data (Wikinews titles and sentences,
  SciFact titles and abstract sentences, STSb train and dev sentences): about 143k texts,
  encoded for real with all-MiniLM-L6-v2 (through ``torch.compile``, float32, the same vectors
  as eager mode) in resumable 5,000-text chunks; ``--no-encode`` uses the chunks already
  cached (a prefix of the texts) and fills the rest. The last 1,000 distinct texts are never
  rows: they are the "held-out sentences" queries, news and science sentences like the rows.
* The rest up to the row count: mixes of two related real vectors. Row ``i`` beyond the real
  ones is ``normalize(w * v[a] + (1 - w) * v[b])`` with ``a = i % n_real``, ``b`` one of
  ``a``'s 20 nearest real vectors (drawn with a fixed seed) and ``w`` uniform in
  [0.25, 0.75]: about the vector of a two-sentence passage made of ``a`` and a sentence on
  the same subject (mean pooling makes the vector of a passage close to the weighted mean of
  its sentences' vectors). Each filler is its own point, spread along the directions the real
  sentences span. (Real vectors plus isotropic Gaussian noise, tried first, put two dozen
  near-copies of each sentence in a tight ball: a graph of cliques that no real corpus looks
  like, where HNSW recall at ef_search 100 fell to 0.68.)

Vectors are cached outside the repository (``--cache``, default ``/work/cache15``): never
committed, reused by every later run.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA
from benchmarks.data import corpus_texts

MODEL = "all-MiniLM-L6-v2"
CHUNK = 5_000
NEIGHBOURS = 20  # a filler mixes a real vector with one of its this many nearest real ones
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


def nearest_real(real: np.ndarray, k: int) -> np.ndarray:
    """For each real vector, the row numbers of its ``k`` nearest other real vectors."""
    near = np.empty((len(real), k), dtype=np.int64)
    for start in range(0, len(real), 2_000):
        scores = real[start : start + 2_000] @ real.T
        rows = np.arange(start, start + len(scores))
        scores[rows - start, rows] = -np.inf  # not itself
        near[start : start + len(scores)] = np.argpartition(-scores, k, axis=1)[:, :k]
    return near


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
    path = cache / f"mixed-{len(real)}-{rows}-{NEIGHBOURS}.npy"
    if not path.exists():
        rng = np.random.default_rng(15)
        near = nearest_real(real, NEIGHBOURS)
        out = np.empty((rows, real.shape[1]), dtype=np.float32)
        out[: len(real)] = real
        for start in range(len(real), rows, 100_000):
            stop = min(rows, start + 100_000)
            a = np.arange(start, stop) % len(real)
            b = near[a, rng.integers(0, NEIGHBOURS, len(a))]
            w = rng.uniform(0.25, 0.75, (len(a), 1)).astype(np.float32)
            mixed = w * real[a] + (1 - w) * real[b]
            out[start:stop] = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
        np.save(path.with_suffix(".tmp.npy"), out)
        path.with_suffix(".tmp.npy").rename(path)
    vectors = np.load(path, mmap_mode="r")
    all_texts = [texts[i % len(texts)] for i in range(rows)]
    return vectors, all_texts, len(real)
