"""The demo corpus: 5,550 Wikinews articles on economy and politics (CC BY 2.5).

``data/wikinews.jsonl.gz`` holds one JSON object per line, newest first within each category
and the two categories alternating, so that the first N lines are a mix of both::

    {"id": "ID893", "title": "...", "date": "2004-11-17", "categories": ["economy"],
     "url": "https://en.wikinews.org/wiki/...", "text": "..."}

Wikinews files 217 of them under both categories; they are stored once, as ``both``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from django.db import transaction

from .models import Article, Category

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "wikinews.jsonl.gz"


def read_corpus(path: Path = CORPUS_PATH, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The corpus records in file order; the first ``limit`` only when given."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        yield from islice((json.loads(line) for line in lines), limit)


def to_article(record: dict[str, Any]) -> Article:
    categories = set(record["categories"])
    category = Category.BOTH if len(categories) > 1 else Category(categories.pop())
    published = dt.date.fromisoformat(record["date"]) if record.get("date") else None
    return Article(
        title=record["title"][:300],
        body=record["text"],
        category=category,
        published=published,
        url=record["url"],
    )


def load(limit: int | None = None, batch_size: int = 500) -> int:
    """Insert the articles that are not in the database yet (matched by url); returns how many.

    ``bulk_create`` sends no ``post_save`` signals, so nothing is queued for embedding here:
    the caller queues the stale rows once (``django_sbert.tasks.enqueue_stale``).
    """
    existing = set(Article.objects.values_list("url", flat=True))
    new = [to_article(r) for r in read_corpus(limit=limit) if r["url"] not in existing]
    with transaction.atomic():
        Article.objects.bulk_create(new, batch_size=batch_size, ignore_conflicts=True)
    return len(new)
