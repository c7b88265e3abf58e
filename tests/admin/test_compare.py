"""The "Before and after" page of an encoder version: both versions' top results side by side
for the run's eval queries and a typed query, with nDCG@10 per eval query (real PostgreSQL,
the tiny random model, a real run trained in the test process)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from django_sbert import serving
from django_sbert.encoder.metrics import ranking_metrics
from django_sbert.finetuning import compare, runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import EncoderVersion, RunStatus, StagedEmbedding, TrainingPair
from tests.admin.test_admin import ADMIN, ALL, TOPICS, user_with
from tests.testapp.models import Article

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.urls("tests.admin.urls"),
    pytest.mark.usefixtures("model_dir"),
]


@pytest.fixture
def staff(client):
    client.force_login(user_with("staff", ALL))
    return client


def _candidate(embed) -> tuple[EncoderVersion, list[Article]]:
    """Articles whose body opens with their topic's answer (embedded by the serving model),
    eval pairs headline -> answer, train pairs, and a trained candidate."""
    articles = Article.objects.bulk_create(
        Article(title=query, body=f"{answer}. More about it follows here.")
        for query, answer in TOPICS
    )
    embed(*articles)
    evaluation = TrainingPair.objects.bulk_create(
        TrainingPair(text_a=q, text_b=a, split="eval") for q, a in TOPICS
    )
    train = TrainingPair.objects.bulk_create(
        TrainingPair(text_a=f"{q} {n}", text_b=f"{a} {n}") for n in range(3) for q, a in TOPICS
    )
    hyper = Hyperparameters(loss="mnrl", epochs=1, batch_size=4, early_stopping=False)
    run = runs.create_run(
        "default", [p.pk for p in evaluation + train], hyperparameters=hyper, enqueue=False
    )
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    return EncoderVersion.objects.get(run=run), articles


@pytest.mark.heavy
def test_both_versions_rank_the_same_pool_with_their_own_vectors(embed):
    candidate, articles = _candidate(embed)
    active = serving.serving_record("default", max_age=0).version
    stored = {a.pk: np.asarray(a.embedding) for a in Article.objects.all()}
    assert compare.baseline_version(candidate) == active

    queries = compare.eval_queries(candidate)
    assert list(queries) == [q for q, _ in TOPICS[: compare.EVAL_QUERIES]]
    comparisons = compare.compare(candidate, active, queries)
    assert [c.query for c in comparisons] == list(queries)
    first = comparisons[0]
    for side, version in ((first.before, active), (first.after, candidate.version)):
        assert side.version == version
        model = serving.get_encoder("default", version)
        query = model.encode([first.query], normalize=True)[0]
        for hit in side.hits:  # each side scores with its own model
            text = model.encode([hit.text], normalize=True)[0]
            assert hit.score == pytest.approx(float(query @ text), abs=1e-5)
        assert [h.score for h in side.hits] == sorted((h.score for h in side.hits), reverse=True)
        # The answer, and the article that opens with it, are relevant; nDCG is on the shown list.
        answer = TOPICS[0][1]
        relevant = {h.text for h in side.hits if h.relevant}
        assert answer in relevant
        assert any(h.row is not None and h.row.pk == articles[0].pk for h in side.hits)
        assert all(
            h.text == answer or h.text.startswith(TOPICS[0][0]) for h in side.hits if h.relevant
        )
        expected = ranking_metrics(
            {first.query: [h.text for h in side.hits]}, {first.query: relevant}
        )
        assert side.ndcg == pytest.approx(expected["ndcg@10"])
    assert {h.text for h in first.before.hits} == {h.text for h in first.after.hits}

    # Nothing served changed: the same version, the same vectors, nothing staged.
    assert serving.serving_record("default", max_age=0).version == active
    assert {a.pk: np.asarray(a.embedding) for a in Article.objects.all()}.keys() == stored.keys()
    for article in Article.objects.all():
        assert np.array_equal(np.asarray(article.embedding), stored[article.pk])
    assert not StagedEmbedding.objects.exists()


@pytest.mark.heavy
def test_the_page_shows_eval_queries_and_a_typed_query(staff, embed):
    candidate, _ = _candidate(embed)
    url = f"{ADMIN}/encoderversion/{candidate.pk}/compare/"
    page = staff.get(url).content.decode()
    assert "Before and after" in page and candidate.version in page
    headings = re.findall(r'<h2 class="sbert-query">(.*?)</h2>', page)
    assert headings == [q for q, _ in TOPICS[: compare.EVAL_QUERIES]]  # a handful of the split
    assert page.count("nDCG@10:") == compare.EVAL_QUERIES
    assert "On the whole eval split" in page  # the run's stored metrics
    # Answers of the other eval queries rank in every query's list: only a query's own are
    # labelled its expected answers.
    first = page.split('<h2 class="sbert-query">')[1]
    labelled = re.findall(r"<em>([^<]*)</em> \(an expected answer\)", first)
    assert labelled and set(labelled) == {TOPICS[0][1]}, labelled
    assert "(another eval query's answer)" in first
    typed = staff.get(url, {"q": "rain closes classrooms"}).content.decode()
    assert "rain closes classrooms" in typed and "nDCG@10:" not in typed
    assert typed.count('class="sbert-side"') == 2
    # Linked from the version's page and the run's.
    change = staff.get(f"{ADMIN}/encoderversion/{candidate.pk}/change/").content.decode()
    assert url in change
    assert url in staff.get(f"{ADMIN}/trainingrun/{candidate.run.pk}/change/").content.decode()


def test_missing_files_and_nothing_to_compare_are_said_plainly(staff, embed):
    Article.objects.create(title="central bank raises interest rates")
    missing = EncoderVersion.objects.create(
        version="default-gone", encoder_name="default", directory="default/gone"
    )
    page = staff.get(f"{ADMIN}/encoderversion/{missing.pk}/compare/").content.decode()
    assert "sbert-compare-error" in page and "cannot be loaded on this host" in page
    # The serving version replaced nothing: there is no "before".
    base = EncoderVersion.objects.create(
        version=serving.serving_record("default", max_age=0).version,
        encoder_name="default",
        is_base=True,
        status="active",
    )
    serving.forget_serving()
    page = staff.get(f"{ADMIN}/encoderversion/{base.pk}/compare/").content.decode()
    assert "replaced no other version" in page


def test_the_page_needs_the_view_permission(client):
    candidate = EncoderVersion.objects.create(
        version="default-x", encoder_name="default", directory="default/x"
    )
    client.force_login(user_with("nobody", []))
    assert client.get(f"{ADMIN}/encoderversion/{candidate.pk}/compare/").status_code == 403


@pytest.fixture
def published_only_admin():
    """Article's admin, as a site with drafts writes it: unpublished rows are not listed."""
    from django.contrib import admin

    from tests.testapp.admin import ArticleAdmin

    class PublishedArticleAdmin(ArticleAdmin):
        def get_queryset(self, request):
            return super().get_queryset(request).filter(published=True)

    admin.site.unregister(Article)
    admin.site.register(Article, PublishedArticleAdmin)
    yield
    admin.site.unregister(Article)
    admin.site.register(Article, ArticleAdmin)


def test_compare_page_hides_rows_the_user_may_not_see(
    client, embed, published_only_admin, settings
):
    from django.conf import settings as django_settings

    from tests.tiny_model import moved_tiny_encoder

    rows = Article.objects.bulk_create(
        [
            Article(
                title="Secret merger with Acme", body="the merger is not public", published=False
            ),
            Article(title="merger of two football clubs", body="the clubs agree a merger"),
            Article(title="storm closes schools", body="rain and wind"),
        ]
    )
    embed(*rows)
    tuned = moved_tiny_encoder(django_settings.TINY_MODEL_DIR, seed=3)
    key, version = serving.save_encoder(tuned, "default", serving.base_label("default"))
    candidate = EncoderVersion.objects.create(
        version=version, encoder_name="default", directory=key
    )
    url = f"{ADMIN}/encoderversion/{candidate.pk}/compare/"

    # Only view_encoderversion: no article is searched, and the page says the model was left out.
    client.force_login(user_with("versions_only", ["view_encoderversion"]))
    page = client.get(url, {"q": "merger"}).content.decode()
    assert "Secret merger" not in page and "football clubs" not in page
    assert "articles" in left_out(page)

    # view_article too: the rows Article's admin lists, never the draft it hides.
    client.force_login(user_with("article_viewer", ["view_encoderversion", "view_article"]))
    page = client.get(url, {"q": "merger"}).content.decode()
    assert "merger of two football clubs" in page
    i = page.find("Secret merger")
    assert i < 0, page[i - 300 : i + 100]
    assert "articles" not in left_out(page)


def left_out(page: str) -> list[str]:
    """The models the page says it did not search."""
    found = re.search(r'class="sbert-left-out">[^:]*: ([^<]*)\.</p>', page)
    return found.group(1).split(", ") if found else []
