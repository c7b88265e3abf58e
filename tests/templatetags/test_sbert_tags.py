"""``{% load sbert %}`` (django_sbert/templatetags/sbert.py) rendered through Django's template
engine, on real PostgreSQL with the tiny random model: the best passage escaped with its
nearest sentence marked, the similarity as a number and a bar, and "more like this" served
from the cache until the serving version changes."""

from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from django.db import connection
from django.template import Context, Template
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from django_sbert import indexing, serving
from django_sbert.finetuning import promotion
from django_sbert.models import VersionStatus
from django_sbert.query.highlight import Snippet, highlight_hits
from django_sbert.templatetags import sbert as sbert_tags
from django_sbert.templatetags.sbert import similar_cache_key, similar_rows
from tests.finetuning.test_versions import make_pairs, train
from tests.testapp.models import Article, Report

pytestmark = pytest.mark.django_db

ATTACK = "The council paid <script>alert(1)</script> for the new stadium."
PASSAGE = f"The dog runs fast and the cat is slow. {ATTACK} A child plays guitar."
# Short enough for one passage of Report (24 tokens of the tiny model, which spells markup
# character by character).
MARKUP = "The <i>stadium</i> was paid."
TITLES = [
    "central bank raises interest rates",
    "the bank lifted its rate to fight inflation",
    "football team wins the cup",
    "the club took the trophy after a late goal",
    "storm closes schools",
    "heavy rain and wind shut classrooms",
    "city opens a new library",
]


@pytest.fixture(autouse=True)
def fresh_tables_and_cache():
    """Empty tables and indexes (dead HNSW entries of rolled-back tests would crowd a search;
    TRUNCATE is undone with the test) and an empty cache."""
    passages = Report._meta.get_field("embedding").passage_model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {passages}, testapp_report, testapp_article")
    cache.clear()
    yield
    cache.clear()


def render(source: str, **context) -> str:
    return Template("{% load sbert %}" + source).render(Context(context))


def articles() -> list[Article]:
    rows = Article.objects.bulk_create(
        Article(title=title, body=f"story {i}") for i, title in enumerate(TITLES)
    )
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    return [Article.objects.get(pk=row.pk) for row in rows]


# -- sbert_passage ---------------------------------------------------------------------------


def test_a_passage_renders_escaped_with_the_nearest_sentence_marked():
    hit = Report(title="stadium report")
    hit.passage = {"text": PASSAGE, "start": 0, "end": len(PASSAGE), "index": 0}
    highlight_hits([hit], ATTACK)
    assert hit.snippet == Snippet(
        "The dog runs fast and the cat is slow. ", ATTACK, " A child plays guitar."
    )  # the same text as the query: cosine 1
    html = render("{% sbert_passage hit %}", hit=hit)
    assert html == (
        "The dog runs fast and the cat is slow. <mark>The council paid "
        "&lt;script&gt;alert(1)&lt;/script&gt; for the new stadium.</mark> A child plays guitar."
    )
    assert "<script>" not in html


def test_a_search_by_passages_then_highlight_then_the_tag():
    Report.objects.create(
        title="stadium report", body=f"The dog runs fast. {MARKUP} The cat is slow."
    )
    Report.objects.create(title="other report", body="A woman is playing music in the old car.")
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))
    hits = list(Report.objects.similar_to(MARKUP)[:2])
    assert hits[0].title == "stadium report" and MARKUP in hits[0].passage["text"]

    highlight_hits(hits, MARKUP)
    assert hits[0].snippet.match == MARKUP
    html = render("{% sbert_passage hit %}", hit=hits[0])
    snippet = hits[0].snippet
    marked = "<mark>The &lt;i&gt;stadium&lt;/i&gt; was paid.</mark>"
    assert html == f"{escape(snippet.before)}{marked}{escape(snippet.after)}"
    assert "<i>" not in html


def test_a_snippet_is_cut_at_words_and_every_part_escaped():
    hit = Report(title="x")
    hit.snippet = Snippet(
        "…the council said <b> ", "It paid <i>more</i>.", " Then the words go on here."
    )
    html = render("{% sbert_passage hit %}", hit=hit)
    assert html == (
        "…the council said &lt;b&gt; <mark>It paid &lt;i&gt;more&lt;/i&gt;.</mark> "
        "Then the words go on here."
    )
    short = render("{% sbert_passage hit chars=45 %}", hit=hit)
    # 45 characters: the sentence whole, the context cut at words on both sides.
    assert short == "…said &lt;b&gt; <mark>It paid &lt;i&gt;more&lt;/i&gt;.</mark> Then the…"
    assert len(re.sub(r"<[^>]+>", "", short).replace("&lt;", "<").replace("&gt;", ">")) <= 45
    tiny = render("{% sbert_passage hit chars=10 %}", hit=hit)
    assert tiny == "<mark>It paid…</mark>"  # the sentence alone is longer: cut too


def test_without_a_snippet_the_best_passage_or_nothing():
    hit = Report(title="x")
    hit.passage = {"text": "A <b>bold</b> claim. And more words after it."}
    assert render("{% sbert_passage hit %}", hit=hit) == (
        "A &lt;b&gt;bold&lt;/b&gt; claim. And more words after it."
    )
    cut = render("{% sbert_passage hit chars=24 %}", hit=hit)
    assert cut == "A &lt;b&gt;bold&lt;/b&gt; claim.…"  # 24 characters would end inside "And"
    assert render("[{% sbert_passage hit %}]", hit=Article(title="no passage")) == "[]"
    assert render("[{% sbert_passage hit %}]", hit={"title": "a values() row"}) == "[]"


def test_highlight_hits_leaves_rows_without_passages_alone():
    rows = articles()
    hits = list(Article.objects.similar_to("interest rates")[:3])
    before = [dict(hit.__dict__) for hit in hits]
    highlight_hits(hits, "interest rates")
    assert [hit.__dict__ for hit in hits] == before  # no snippet, nothing else changed
    assert all(not hasattr(hit, "snippet") for hit in hits)
    mixed = [rows[0], Report(title="r")]
    mixed[1].passage = {"text": "One sentence here. The stadium was paid for."}
    highlight_hits(mixed, "The stadium was paid for.")
    assert not hasattr(mixed[0], "snippet")
    assert mixed[1].snippet == Snippet("One sentence here. ", "The stadium was paid for.", "")


# -- sbert_similarity ------------------------------------------------------------------------


def test_similarity_as_a_number_and_a_bar():
    articles()
    hits = list(Article.objects.similar_to("central bank raises interest rates")[:3])
    for hit in hits:
        html = render("{% sbert_similarity hit %}", hit=hit)
        number = f"{hit.similarity:.2f}"
        assert f'<span class="sbert-similarity-value">{number}</span>' in html
        bar = float(re.search(r'<meter [^>]*value="([0-9.]+)"', html).group(1))
        assert bar == pytest.approx(min(max(hit.similarity, 0.0), 1.0), abs=1e-4)
        assert f'title="Cosine similarity {number}"' in html
        assert f'aria-label="Cosine similarity {number}"' in html
    assert ">100%</meter>" in render("{% sbert_similarity hit %}", hit={"similarity": 1.0})


def test_similarity_renders_nothing_without_one_and_clamps_the_bar():
    assert render("{% sbert_similarity hit %}", hit=Article(title="plain")) == ""
    hybrid_keyword_only = Article(title="words only")
    hybrid_keyword_only.similarity = None
    assert render("{% sbert_similarity hit %}", hit=hybrid_keyword_only) == ""
    html = render("{% sbert_similarity hit %}", hit={"similarity": -0.25})
    assert 'value="0.0000"' in html and ">-0.25<" in html


# -- sbert_similar ---------------------------------------------------------------------------


def test_sbert_similar_returns_the_nearest_rows_without_the_object():
    rows = articles()
    obj = rows[0]
    html = render(
        "{% sbert_similar obj 3 as similar %}{% for r in similar %}{{ r.pk }},{% endfor %}",
        obj=obj,
    )
    expected = [r.pk for r in Article.objects.similar_to(obj)[:3]]
    assert len(expected) == 3 and obj.pk not in expected
    assert html == "".join(f"{pk}," for pk in expected)


def test_the_list_form_renders_each_row_with_its_similarity():
    rows = articles()
    html = render("{% sbert_similar obj 2 %}", obj=rows[0])
    listed = re.findall(r"<li>(.*?) <span", html)
    expected = list(Article.objects.similar_to(rows[0])[:2])
    assert listed == [r.title for r in expected]
    assert html.count("<meter") == 2 and rows[0].title not in listed


def test_a_second_call_is_served_from_the_cache(settings):
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 600}
    obj = articles()[2]
    with CaptureQueriesContext(connection) as first:
        found = similar_rows(obj, 4)
    assert len(first) >= 1 and len(found) == 4
    with CaptureQueriesContext(connection) as second:
        again = render(
            "{% sbert_similar obj 4 as s %}{% for r in s %}{{ r.pk }},{% endfor %}", obj=obj
        )
    assert len(second) == 0
    assert again == "".join(f"{r.pk}," for r in found)
    assert [r.similarity for r in similar_rows(obj, 4)] == [r.similarity for r in found]
    # another k is another entry
    with CaptureQueriesContext(connection) as other_k:
        assert len(similar_rows(obj, 2)) == 2
    assert len(other_k) >= 1


def test_no_caching_with_zero_seconds(settings, monkeypatch):
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 600}
    monkeypatch.setattr(sbert_tags, "SIMILAR_CACHE_SECONDS", 0)
    obj = articles()[0]
    similar_rows(obj, 3)
    with CaptureQueriesContext(connection) as second:
        similar_rows(obj, 3)
    assert len(second) >= 1


@pytest.mark.heavy
def test_a_promotion_gives_a_fresh_list(model_dir):
    rows = articles()
    obj = rows[0]
    base = serving.encoder_version("default")
    before_key = similar_cache_key(obj, 3, Article._meta.get_field("embedding"))
    before = similar_rows(obj, 3)
    assert cache.get(before_key) is not None

    candidate = train(make_pairs()).candidate
    promotion.start_promotion(candidate, force=True, run_now=True)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.ACTIVE
    serving.forget_serving()
    assert serving.encoder_version("default") == candidate.version != base

    obj = Article.objects.get(pk=obj.pk)
    assert obj.embedding_version == candidate.version
    after_key = similar_cache_key(obj, 3, Article._meta.get_field("embedding"))
    assert after_key != before_key
    with CaptureQueriesContext(connection) as fresh:
        after = similar_rows(obj, 3)
    assert len(fresh) >= 1  # not the cached list of the old version
    expected = list(Article.objects.similar_to(obj)[:3])
    assert [r.pk for r in after] == [r.pk for r in expected]
    assert [r.similarity for r in after] == pytest.approx([r.similarity for r in expected])
    assert [r.similarity for r in after] != pytest.approx([r.similarity for r in before])


def test_an_object_without_a_vector_gives_an_empty_list():
    articles()
    fresh = Article.objects.create(title="not embedded yet")
    assert similar_rows(fresh, 3) == []
    assert render("[{% sbert_similar obj 3 %}]", obj=fresh) == "[]"
    deferred = Article.objects.defer("embedding").get(pk=fresh.pk)
    assert similar_rows(deferred, 3) == []
    assert similar_rows(None, 3) == [] and similar_rows(Article(title="unsaved"), 3) == []
    # nothing was cached for it: once embedded, the rows come
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    assert len(similar_rows(Article.objects.get(pk=fresh.pk), 3)) == 3


def test_the_tags_templates_can_be_overridden(settings, tmp_path):
    folder = tmp_path / "django_sbert" / "tags"
    folder.mkdir(parents=True)
    (folder / "similarity.html").write_text("{{ number }} of 1")
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    hit = Article(title="x")
    hit.similarity = 0.5
    assert render("{% sbert_similarity hit %}", hit=hit) == "0.50 of 1"
