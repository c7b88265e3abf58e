"""Wagtail: django-sbert's backend against Wagtail's database backend on Wikinews pages.

    python -m benchmarks.wagtail --articles 1000

Each Wikinews article becomes a news page whose title is its id (``Article ID893``) and whose
StreamField body is the article's text; its headline is the query that should find it (one
relevant page per query: nDCG@10 = 1 / log2(rank + 1) when found in the top 10). Without the
headline on the page the query has to be answered from the body, as a visitor's words are.
Both backends index the same pages with ``update_index``; django-sbert's time includes
encoding every page with all-MiniLM-L6-v2 on this machine's CPU. Search p50 is the median
wall time of ``NewsPage.objects.live().search(headline)[:10]`` evaluated.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import time

from benchmarks.common import DATA as SHARED_DATA
from benchmarks.common import cpu_line, p50_p99

DATA = SHARED_DATA / "wikinews"
MODEL = "all-MiniLM-L6-v2"


def articles(limit: int) -> list[dict]:
    rows = []
    for path in sorted(DATA.glob("*.jsonl")):
        with path.open() as handle:
            rows += [json.loads(line) for line in handle]
    # An article filed under both categories is one page.
    rows = list({r["id"]: r for r in rows if r.get("title") and r.get("text")}.values())
    return rows[:limit] if limit else rows


def setup() -> None:
    from benchmarks.django_setup import setup_django

    sbert = {"ENCODERS": {"default": {"MODEL": MODEL}}, "AUTO_EMBED": False}
    setup_django(
        sbert,
        apps=(
            "wagtail.sites",
            "wagtail.search",
            "wagtail",
            "modelcluster",
            "taggit",
            "django_sbert.contrib.wagtail",
            "tests.wagtail.newsapp",
        ),
        WAGTAILSEARCH_BACKENDS={
            "database": {"BACKEND": "wagtail.search.backends.database", "AUTO_UPDATE": False},
            "vector": {
                "BACKEND": "django_sbert.contrib.wagtail",
                "OPTIONS": {"MODE": "vector"},
                "AUTO_UPDATE": False,
            },
            "hybrid": {
                "BACKEND": "django_sbert.contrib.wagtail",
                "OPTIONS": {"MODE": "hybrid"},
                "AUTO_UPDATE": False,
            },
        },
        WAGTAIL_SITE_NAME="bench",
        STATIC_URL="/static/",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=int, default=0, help="pages; 0: all of them")
    parser.add_argument("--queries", type=int, default=1000, help="headlines searched, spread")
    args = parser.parse_args()
    setup()
    from django.core.management import call_command
    from wagtail.models import Locale, Page

    from tests.wagtail.newsapp.models import NewsPage

    rows = articles(args.articles)
    Locale.objects.get_or_create(language_code="en")
    root = Page.get_first_root_node()
    started = time.perf_counter()
    section = root.add_child(instance=Page(title="News", slug="news-bench"))
    pages = []
    for row in rows:
        page = NewsPage(
            title=f"Article {row['id']}", slug=row["id"].lower(), body=[("paragraph", row["text"])]
        )
        section.add_child(instance=page)
        pages.append(page)
    print(f"{cpu_line()}")
    print(f"{len(pages)} Wikinews pages created in {time.perf_counter() - started:.0f} s")

    from django_sbert.serving import encode_texts

    started = time.perf_counter()
    encode_texts(["warm up"])  # load (and compile) the encoder: not part of update_index's time
    print(f"encoder loaded in {time.perf_counter() - started:.1f} s")
    timings = {}
    for name in ("database", "vector"):  # "hybrid" reads the table "vector" wrote
        started = time.perf_counter()
        call_command("update_index", backend_name=name, stdout=io.StringIO())
        timings[name] = time.perf_counter() - started
        print(f"update_index --backend {name}: {timings[name]:.1f} s")

    from django_sbert.serving import clear_query_cache

    for name in ("database", "vector", "hybrid"):
        # Each backend encodes its own queries: vector's cached vectors would spare hybrid's.
        clear_query_cache()
        gains, latencies = [], []
        step = max(1, len(rows) // max(1, args.queries))
        for row, page in list(zip(rows, pages, strict=True))[::step][: args.queries]:
            started = time.perf_counter()
            found = list(NewsPage.objects.live().search(row["title"], backend=name)[:10])
            latencies.append(time.perf_counter() - started)
            ranks = [i for i, p in enumerate(found) if p.pk == page.pk]
            gains.append(1 / math.log2(ranks[0] + 2) if ranks else 0.0)
        p50, p99 = p50_p99([s * 1000 for s in latencies])
        ndcg = sum(gains) / len(gains)
        print(
            f"{name:9} nDCG@10 {ndcg:.4f} over {len(gains)} headlines  "
            f"search p50 {p50:.1f} ms  p99 {p99:.1f} ms"
        )


if __name__ == "__main__":
    main()
