"""Wagtail: django-sbert's backend against Wagtail's database backend on Wikinews pages.

    python -m benchmarks.wagtail --articles 1000

Each Wikinews article becomes a news page whose title is its id (``Article ID893``) and whose
StreamField body is the article's text; its headline is the query that should find it (one
relevant page per query: nDCG@10 = 1 / log2(rank + 1) when found in the top 10). Without the
headline on the page the query has to be answered from the body, as a visitor's words are.
Both backends index the same pages with ``update_index``; django-sbert's time includes
encoding every page with all-MiniLM-L6-v2 on this machine's CPU. Search p50 is the median
wall time of ``NewsPage.objects.live().search(headline)[:10]`` evaluated; the pages of one
article in 100 are also searched under a 1%-selective filter (``.filter(category="rare")``).

With ``DATABASE_URL`` naming a database an earlier run filled, its pages and indexes are
searched again (indexing 5,550 pages with all-MiniLM-L6-v2 takes most of an hour on 2 cores)::

    DATABASE_URL=postgresql://... python -m benchmarks.wagtail --articles 0 --rounds 3
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
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


RARE = "rare"  # the category of one page in 100: the selective filter's pages


def create_pages(rows: list[dict]) -> list:
    """One news page per article under a new section; every 100th in category ``RARE``."""
    from wagtail.models import Locale, Page

    from tests.wagtail.newsapp.models import NewsPage

    Locale.objects.get_or_create(language_code="en")
    root = Page.get_first_root_node()
    section = root.add_child(instance=Page(title="News", slug="news-bench"))
    pages = []
    for i, row in enumerate(rows):
        page = NewsPage(
            title=f"Article {row['id']}",
            slug=row["id"].lower(),
            body=[("paragraph", row["text"])],
            category=RARE if i % 100 == 0 else "",
        )
        section.add_child(instance=page)
        pages.append(page)
    return pages


def kept_pages(rows: list[dict]) -> list | None:
    """The pages of an earlier run in this database (``DATABASE_URL``), in ``rows`` order;
    None when there are none or they are not these articles."""
    from wagtail.models import Page

    from tests.wagtail.newsapp.models import NewsPage

    if not Page.objects.filter(slug="news-bench").exists():
        return None
    by_slug = {p.slug: p for p in NewsPage.objects.all()}
    pages = [by_slug.get(row["id"].lower()) for row in rows]
    return pages if all(pages) and len(by_slug) == len(rows) else None


def search_round(name: str, pairs: list, queryset) -> tuple[list[float], list[float], int]:
    """nDCG@10 gains and latencies (s) of each headline searched with backend ``name``, and
    how many searches came back with fewer than 10 objects."""
    gains, latencies, short = [], [], 0
    for row, page in pairs:
        started = time.perf_counter()
        found = list(queryset.search(row["title"], backend=name)[:10])
        latencies.append(time.perf_counter() - started)
        ranks = [i for i, p in enumerate(found) if p.pk == page.pk]
        gains.append(1 / math.log2(ranks[0] + 2) if ranks else 0.0)
        short += len(found) < 10
    return gains, latencies, short


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=int, default=0, help="pages; 0: all of them")
    parser.add_argument("--queries", type=int, default=1000, help="headlines searched, spread")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of searches (medians)")
    args = parser.parse_args()
    setup()
    from django.core.management import call_command

    from tests.wagtail.newsapp.models import NewsPage

    rows = articles(args.articles)
    print(f"{cpu_line()}")
    started = time.perf_counter()
    pages = kept_pages(rows)
    fresh = pages is None
    if fresh:
        pages = create_pages(rows)
        print(f"{len(pages)} Wikinews pages created in {time.perf_counter() - started:.0f} s")
    else:  # a DATABASE_URL that kept an earlier run: its pages and index are searched again
        print(f"{len(pages)} Wikinews pages and their indexes kept from an earlier run")

    from django_sbert.serving import encode_texts

    started = time.perf_counter()
    encode_texts(["warm up"])  # load (and compile) the encoder: not part of update_index's time
    print(f"encoder loaded in {time.perf_counter() - started:.1f} s")
    for name in ("database", "vector") if fresh else ():  # "hybrid" reads "vector"'s table
        started = time.perf_counter()
        call_command("update_index", backend_name=name, stdout=io.StringIO())
        print(f"update_index --backend {name}: {time.perf_counter() - started:.1f} s")

    from django_sbert.serving import clear_query_cache

    step = max(1, len(rows) // max(1, args.queries))
    pairs = list(zip(rows, pages, strict=True))[::step][: args.queries]
    # The selective filter: headlines of the 1% of pages in category RARE, searched among them.
    rare = [(row, page) for row, page in zip(rows, pages, strict=True) if page.category == RARE]
    p50s: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        for name in ("database", "vector", "hybrid"):
            # Each backend encodes its own queries: vector's cached vectors would spare hybrid's.
            clear_query_cache()
            gains, latencies, _ = search_round(name, pairs, NewsPage.objects.live())
            p50, p99 = p50_p99([s * 1000 for s in latencies])
            p50s.setdefault(name, []).append(p50)
            print(
                f"round {round_ + 1} {name:9} nDCG@10 {sum(gains) / len(gains):.4f} over "
                f"{len(gains)} headlines  search p50 {p50:.1f} ms  p99 {p99:.1f} ms"
            )
            if name == "database":
                continue
            clear_query_cache()
            filtered = NewsPage.objects.live().filter(category=RARE)
            gains, latencies, short = search_round(name, rare, filtered)
            p50, p99 = p50_p99([s * 1000 for s in latencies])
            p50s.setdefault(f"{name}, 1% filter", []).append(p50)
            print(
                f"round {round_ + 1} {name:9} 1%-selective filter ({len(rare)} pages): nDCG@10 "
                f"{sum(gains) / len(gains):.4f}, {short} of {len(rare)} searches short of 10, "
                f"p50 {p50:.1f} ms  p99 {p99:.1f} ms"
            )
    medians = {name: statistics.median(values) for name, values in p50s.items()}
    print(
        f"median p50 over {args.rounds} round(s): "
        + ", ".join(f"{name} {value:.1f} ms" for name, value in medians.items())
    )
    print(f"hybrid / vector p50: {medians['hybrid'] / medians['vector']:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
