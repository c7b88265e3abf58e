"""The Wagtail backend with real Wagtail, PostgreSQL and the tiny model: search, filters,
pagination, modes, indexing on save and delete, update_index, the admin's page search."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("wagtail")  # collected only with its apps (conftest.py)

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from wagtail.models import Page  # noqa: E402
from wagtail.search.backends import get_search_backend  # noqa: E402

from django_sbert.contrib.wagtail.backend import SbertSearchBackend  # noqa: E402
from django_sbert.contrib.wagtail.models import SearchEntry  # noqa: E402
from tests.wagtail.conftest import embed_entries, page_text  # noqa: E402
from tests.wagtail.newsapp.models import NewsPage  # noqa: E402

pytestmark = pytest.mark.django_db

BACKEND_OF_MODE = {"vector": "default", "hybrid": "hybrid", "keyword": "keyword"}

STORIES = [
    ("Central bank raises rates", "The central bank raised interest rates by half a point."),
    ("Floods hit the river valley", "Heavy rain flooded farms and villages along the river."),
    ("Election results announced", "The opposition party won a majority of the seats."),
    ("Striker scores twice", "The striker scored two goals in the cup final."),
    ("Marathon record broken", "A runner broke the marathon world record in Berlin."),
]


@pytest.fixture
def news(site, add_news):
    pages = [add_news(site.world, title, text, category="world") for title, text in STORIES[:3]]
    pages += [add_news(site.sport, title, text, category="sport") for title, text in STORIES[3:]]
    embed_entries()
    return pages


def test_the_backend_is_django_sbert():
    assert isinstance(get_search_backend(), SbertSearchBackend)


def test_saving_a_page_writes_its_index_row_from_its_search_fields(site, add_news):
    page = add_news(site.world, "Budget vote", "Parliament passed the budget.", teaser="Money")
    entry = SearchEntry.objects.get(object_id=str(page.pk))
    assert entry.title == "Budget vote\nMoney"  # title and the boosted teaser weigh A
    assert "Parliament passed the budget." in entry.body  # the StreamField's text
    assert entry.autocomplete == "Budget vote"


def test_search_ranks_pages_by_similarity(news):
    target = news[1]
    results = NewsPage.objects.search(page_text(target))
    assert results[0] == target
    assert len(list(results)) == len(news)


def test_search_applies_live_descendant_of_and_filter_fields(site, news, add_news):
    draft = add_news(site.world, "Draft story", "Not yet published text.", live=False)
    embed_entries()
    query = page_text(draft)
    assert NewsPage.objects.search(query)[0] == draft
    assert draft not in list(NewsPage.objects.live().search(query))
    in_sport = list(NewsPage.objects.descendant_of(site.sport).search(page_text(news[0])))
    assert set(in_sport) == set(news[3:])
    world = list(NewsPage.objects.filter(category="world").search(page_text(news[3])))
    assert set(world) == set(news[:3])  # the draft has no category


def test_search_applies_the_locale(site, news, add_news):
    from wagtail.models import Locale

    french = Locale.objects.create(language_code="fr")
    article = add_news(site.world, "Inondations", "La pluie a inondé la vallée.", locale=french)
    embed_entries()
    found = list(NewsPage.objects.filter(locale=french).search(page_text(news[1])))
    assert found == [article]
    english = list(NewsPage.objects.filter(locale=Locale.get_default()).search(page_text(article)))
    assert article not in english and set(english) == set(news)


def test_pagination_slices_the_ranking(news):
    results = NewsPage.objects.search(page_text(news[2]))
    everything = list(results)
    assert list(results[1:3]) == everything[1:3]
    assert results.count() == len(news)
    assert results[1:3].count() == 2


def test_score_annotation(news):
    results = list(NewsPage.objects.search(page_text(news[4])).annotate_score("_score"))
    assert results[0] == news[4]
    assert results[0]._score == pytest.approx(1.0, abs=1e-3)
    assert [r._score for r in results] == sorted((r._score for r in results), reverse=True)


def test_keyword_mode_and_operator(news):
    keyword = get_search_backend("keyword")
    found = list(keyword.search("marathon record", NewsPage))
    assert found == [news[4]]
    either = set(keyword.search("marathon striker", NewsPage, operator="or"))
    assert either == {news[3], news[4]}
    assert list(keyword.search("marathon striker", NewsPage, operator="and")) == []


def test_hybrid_mode_finds_words_and_meaning(news):
    results = list(get_search_backend("hybrid").search("marathon", NewsPage))
    assert results[0] == news[4]


@pytest.mark.parametrize("mode", ["vector", "hybrid", "keyword"])
def test_a_phrase_keeps_only_the_objects_holding_it_in_every_mode(news, mode):
    from modelsearch.query import Phrase

    backend = get_search_backend(BACKEND_OF_MODE[mode])
    results = backend.search(Phrase("world record"), NewsPage)
    assert list(results) == [news[4]]
    assert results.count() == 1
    assert list(backend.search(Phrase("record world"), NewsPage)) == []


def test_a_boost_of_two_reorders_the_clauses_in_vector_mode(news):
    """Each clause scores 1 / rank: the boosted clause's best object comes first."""
    from modelsearch.query import Boost, PlainText

    marathon, bank = PlainText(page_text(news[4])), PlainText(page_text(news[0]))
    vector = get_search_backend("default")
    assert list(vector.search(marathon | Boost(bank, 2.0), NewsPage))[0] == news[0]
    assert list(vector.search(marathon | Boost(bank, 0.5), NewsPage))[0] == news[4]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_compound_query_lists_the_objects_its_words_select_first(news, mode):
    """Every object is found, but the holders of a clause's words come before the rest,
    whatever the meaning of the words says of the others."""
    from modelsearch.query import PlainText

    backend = get_search_backend(BACKEND_OF_MODE[mode])
    for words in (("striker", "marathon"), ("floods", "election"), ("rates", "record")):
        query = PlainText(words[0]) | PlainText(words[1])
        results = list(backend.search(query, NewsPage))
        held = {page for page in news if any(w in page_text(page).lower() for w in words)}
        assert len(held) == 2 and len(results) == len(news)
        assert set(results[:2]) == held, words


def test_mode_can_be_chosen_per_call(news):
    keyword = get_search_backend("default", MODE="keyword")
    assert keyword.mode == "keyword"
    assert list(keyword.search("floods", NewsPage)) == [news[1]]


def test_autocomplete_prefix(news):
    results = list(NewsPage.objects.autocomplete("Marat"))
    assert results[0] == news[4]


def test_order_by_relevance_false_keeps_the_querysets_order(news):
    results = list(NewsPage.objects.order_by("title").search("x", order_by_relevance=False))
    assert [p.title for p in results] == sorted(p.title for p in news)


def test_delete_removes_the_row(news):
    page = news[0]
    pk = str(page.pk)
    page.delete()
    assert not SearchEntry.objects.filter(object_id=pk).exists()


def test_update_index_writes_and_embeds_every_row(news, capsys):
    SearchEntry.objects.filter(object_id=str(news[0].pk)).delete()
    SearchEntry.objects.update(embedding=None)
    gone = SearchEntry.objects.create(
        content_type=SearchEntry.objects.first().content_type, object_id="999999", title="gone"
    )
    out = io.StringIO()
    call_command("update_index", stdout=out)
    assert "django-sbert: embedded" in capsys.readouterr().out  # progress of the encoding
    assert not SearchEntry.objects.filter(pk=gone.pk).exists()
    indexed = {int(e.object_id) for e in SearchEntry.objects.filter(embedding__isnull=False)}
    assert {p.pk for p in news} <= indexed
    assert NewsPage.objects.search(page_text(news[0]))[0] == news[0]


def test_admin_page_search_goes_through_the_backend(client, settings, news):
    settings.ROOT_URLCONF = "tests.wagtail.urls"
    user = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    response = client.get("/cms/pages/search/", {"q": "Marathon"})
    assert response.status_code == 200
    assert "Marathon record broken" in response.content.decode()
    # Without its index rows nothing is found: the admin searched this backend's table.
    SearchEntry.objects.all().delete()
    response = client.get("/cms/pages/search/", {"q": "Marathon"})
    assert "Marathon record broken" not in response.content.decode()


def test_pages_are_any_model_with_search_fields(news):
    assert Page.objects.search(page_text(news[1]))[0].specific == news[1]


def test_documents_are_indexed_and_searched_too(settings, tmp_path):
    from django.core.files.base import ContentFile
    from wagtail.documents.models import Document

    settings.MEDIA_ROOT = str(tmp_path)
    tides = Document.objects.create(title="Tide tables", file=ContentFile(b"x", name="t.txt"))
    Document.objects.create(title="Budget summary", file=ContentFile(b"y", name="b.txt"))
    embed_entries()
    entry = SearchEntry.objects.get(object_id=str(tides.pk), title__startswith="Tide")
    assert Document.objects.search(f"{entry.title} {entry.body}")[0] == tides


def test_a_long_body_is_searched_by_its_passages(site, news, add_news):
    """A long StreamField body is split into passages; a page ranks by its best one, so its
    last paragraph is found as well as its first."""
    from django_sbert.contrib.wagtail.models import SearchEntryEmbeddingPassage

    story = " ".join(text for _, text in STORIES[:3])
    long_page = add_news(
        site.world,
        "A long report",
        " ".join([story] * 40) + " The orchestra played a quantum zebra symphony at dawn.",
        category="world",
    )
    embed_entries()
    entry = SearchEntry.objects.get(object_id=str(long_page.pk))
    passages = list(SearchEntryEmbeddingPassage.objects.filter(row=entry).order_by("ordinal"))
    assert len(passages) > 3  # far longer than the encoder's window
    last = passages[-1].text
    assert "zebra symphony" in last
    found = list(NewsPage.objects.live().search(last)[:3])
    assert found[0].pk == long_page.pk


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_page_searches_keep_the_querysets_order_and_specific(news, mode):
    """``order_by`` on a field, ``F()`` orderings and ``specific()`` on a site's pages, with
    ``order_by_relevance=False`` (the admin's sorted search): the matches of the search, in
    the queryset's own order."""
    from django.db.models import F

    backend = BACKEND_OF_MODE[mode]
    query = "striker marathon rates"

    def search(queryset):
        return list(
            queryset.search(query, backend=backend, operator="or", order_by_relevance=False)
        )

    matches = set(NewsPage.objects.search(query, backend=backend, operator="or"))
    assert len(matches) == (3 if mode == "keyword" else len(news))
    by_title = search(NewsPage.objects.order_by("title"))
    assert by_title == sorted(matches, key=lambda p: p.title)
    assert search(NewsPage.objects.order_by("-title")) == by_title[::-1]
    assert search(NewsPage.objects.order_by(F("title").asc(nulls_first=True))) == by_title
    pages = Page.objects.filter(depth__gt=3).specific()
    specific = search(pages.order_by("title"))
    assert specific == by_title and all(isinstance(p, NewsPage) for p in specific)
    found = list(pages.search("striker", backend=backend))
    assert news[3] in found and all(isinstance(p, NewsPage) for p in found)
    assert list(NewsPage.objects.search("striker", backend=backend, fields=["title"]))[0] == news[3]


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_order_by_a_nullable_date_keeps_wagtails_order(news, mode):
    """Wagtail's admin orders by ``latest_revision_created_at``, which may be null: the
    search keeps the queryset's order, nulls where PostgreSQL puts them."""
    news[0].save_revision()
    news[3].save_revision()
    backend = BACKEND_OF_MODE[mode]
    queryset = NewsPage.objects.order_by("-latest_revision_created_at", "title")
    matches = set(queryset.search("striker marathon rates", backend=backend, operator="or"))
    found = queryset.search(
        "striker marathon rates", backend=backend, operator="or", order_by_relevance=False
    )
    assert list(found) == [p for p in queryset if p in matches]


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_admin_page_search_sorted_by_title_lists_titles_in_order(client, settings, news, mode):
    settings.ROOT_URLCONF = "tests.wagtail.urls"
    settings.WAGTAILSEARCH_BACKENDS = {
        "default": {"BACKEND": "django_sbert.contrib.wagtail", "OPTIONS": {"MODE": mode}}
    }
    user = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    response = client.get("/cms/pages/search/", {"q": "r", "ordering": "title"})
    assert response.status_code == 200
    html = response.content.decode()
    shown = sorted((html.find(p.title), p.title) for p in news if p.title in html)
    assert len(shown) == 4  # raises, river, results, record
    assert [title for _, title in shown] == sorted(title for _, title in shown)
    response = client.get("/cms/pages/search/", {"q": "r", "ordering": "-title"})
    html = response.content.decode()
    shown = sorted((html.find(p.title), p.title) for p in news if p.title in html)
    assert [title for _, title in shown] == sorted((title for _, title in shown), reverse=True)


def test_keyword_search_of_stop_words_finds_nothing_sorted_or_not(news):
    """Only stop words: no tsquery; nothing is found, whatever the ordering (it used to fail
    with "non-integer constant in ORDER BY")."""
    from django.db.models import F

    keyword = {"backend": "keyword"}
    assert list(NewsPage.objects.search("the", **keyword)) == []
    for queryset in (
        NewsPage.objects.order_by("title"),
        NewsPage.objects.order_by(F("title").desc()),
        Page.objects.specific().order_by("title"),
    ):
        found = queryset.search("the of", order_by_relevance=False, **keyword)
        assert list(found) == [] and found.count() == 0
