"""The fine-tuning workflow through the Django admin, with the test client as a staff user.

Real parts: PostgreSQL, the tiny model, Celery tasks run eagerly (delivery through a real
worker is in test_training_worker.py). Import pairs, fine-tune from the action's
confirmation page, watch the run, promote the candidate, and search with the new vectors.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterator

import numpy as np
import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile

from django_sbert import indexing, serving
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun, VersionStatus
from tests.celery_app import app
from tests.finetuning.topics import NEWS
from tests.testapp.models import Article

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.urls("tests.admin.urls"),
    pytest.mark.usefixtures("model_dir"),
]

ADMIN = "/admin/django_sbert"
TOPICS = NEWS


@pytest.fixture
def eager() -> Iterator[None]:
    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = saved


def user_with(name: str, codenames: list[str]) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)  # fresh permission cache


ALL = [
    f"{action}_{model}"
    for action in ("view", "add", "change", "delete")
    for model in ("trainingpair", "trainingrun", "encoderversion", "article")
]


@pytest.fixture
def staff(client):
    client.force_login(user_with("staff", ALL))
    return client


def csv_file(rows: list[tuple[str, str]], split: str = "train", name: str = "pairs.csv"):
    out = io.StringIO()
    out.write("text_a,text_b,split\n")
    for a, b in rows:
        out.write(f'"{a}","{b}",{split}\n')
    return SimpleUploadedFile(name, out.getvalue().encode(), content_type="text/csv")


def train_rows() -> list[tuple[str, str]]:
    return [(f"{a} {n}", f"{b} {n}") for n in range(4) for a, b in TOPICS]


def select(client, url: str, action: str, pks, follow: bool = False, **extra):
    data = {"action": action, "_selected_action": [str(pk) for pk in pks], **extra}
    return client.post(url, data, follow=follow)


def test_import_reports_bad_rows_and_imports_nothing(staff):
    bad = SimpleUploadedFile(
        "bad.csv", b"text_a,text_b,score\nfine,also fine,0.5\n,missing a,\nx,y,7\n"
    )
    response = staff.post(f"{ADMIN}/trainingpair/import/", {"file": bad, "split": "train"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "2 of 3 rows were rejected" in page and "nothing was imported" in page
    assert "text_a is empty" in page and "outside [0, 1]" in page
    assert not TrainingPair.objects.exists()


@pytest.mark.heavy
def test_the_whole_workflow_through_the_admin(staff, eager, django_capture_on_commit_callbacks):
    rows = Article.objects.bulk_create(
        Article(title=a, body=f"story {i}") for i, (a, _) in enumerate(TOPICS)
    )
    ref = indexing.get_ref("testapp.Article", "embedding")
    indexing.embed_stale(ref)
    base = serving.encoder_version("default")

    # 1. import train and eval pairs
    response = staff.post(f"{ADMIN}/trainingpair/import/", {"file": csv_file(train_rows())})
    assert response.status_code == 302
    evaluation = csv_file(TOPICS, split="eval", name="eval.jsonl.csv")
    staff.post(f"{ADMIN}/trainingpair/import/", {"file": evaluation})
    assert TrainingPair.objects.filter(split="train").count() == 32
    assert TrainingPair.objects.filter(split="eval").count() == 8
    ids = list(TrainingPair.objects.values_list("pk", flat=True))

    # 2. the action's confirmation page, with the loss picked from the pairs' shape
    url = f"{ADMIN}/trainingpair/"
    page = select(staff, url, "fine_tune_encoder", ids)
    assert page.status_code == 200
    assert page.context["form"].initial["loss"] == "mnrl"
    # bad hyperparameters: the page again, with the reason, and no run
    page = select(
        staff, url, "fine_tune_encoder", ids, confirm="yes", encoder="default", loss="mnrl",
        epochs=0, learning_rate=2e-5, batch_size=8, warmup_ratio=0.1,
    )  # fmt: skip
    assert page.status_code == 200 and "epochs" in page.context["form"].errors
    assert not TrainingRun.objects.exists()

    # 3. start it: the run executes (eagerly, once the request's transaction commits)
    with django_capture_on_commit_callbacks(execute=True):
        response = select(
            staff, url, "fine_tune_encoder", ids, confirm="yes", encoder="default", loss="mnrl",
            epochs=1, learning_rate=5e-3, batch_size=8, warmup_ratio=0.1, early_stopping="on",
        )  # fmt: skip
    run = TrainingRun.objects.get()
    assert response.status_code == 302 and response.url.endswith(f"/trainingrun/{run.pk}/change/")
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.created_by.username == "staff"

    # 4. the run's page: progress, loss curve, the eval metric per evaluation beside it with
    # the kept step, metrics; and the status view it polls
    page = staff.get(response.url).content.decode()
    assert "sbert-progress" in page and "<svg" in page and "ndcg@10" in page
    assert run.hyperparameters["early_stopping"] and not run.hyperparameters["hard_negatives"]
    assert "sbert-eval-curve" in page and "sbert-loss-curve" in page
    assert f"kept step {run.evaluations['best_step']} (ndcg@10" in page
    status = staff.get(f"{ADMIN}/trainingrun/{run.pk}/status/").json()
    assert status["finished"] and status["step"] == run.step <= status["total_steps"]
    assert status["evaluations"] == run.evaluations
    candidate = EncoderVersion.objects.get(run=run)
    assert candidate.status == VersionStatus.CANDIDATE
    assert candidate.metrics["ndcg@10"] >= run.metrics_before["ndcg@10"]
    page = staff.get(f"{ADMIN}/encoderversion/").content.decode()
    assert candidate.version in page
    # metrics side by side with the serving version's, on the same eval pairs
    page = staff.get(f"{ADMIN}/encoderversion/{candidate.pk}/change/").content.decode()
    assert f"{candidate.metrics['ndcg@10']:.4f}" in page
    assert f"{run.metrics_before['ndcg@10']:.4f}" in page

    # 5. promote: the gate passes, the vectors are staged and switched in one go
    with django_capture_on_commit_callbacks(execute=True):
        response = select(staff, f"{ADMIN}/encoderversion/", "promote", [candidate.pk])
    assert response.status_code == 302
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.ACTIVE, candidate.promotion_error
    serving.forget_serving()
    assert serving.encoder_version("default") == candidate.version != base

    # 6. every row now holds the candidate's vector, and similar_to ranks with them
    tuned = serving.get_encoder("default", candidate.version)
    for row in Article.objects.all():
        expected = tuned.encode([f"{row.title}\n{row.body}"], normalize=True)[0]
        np.testing.assert_allclose(np.asarray(row.embedding), expected, atol=1e-5)
    query = TOPICS[3][0]
    qvec = tuned.encode([query], normalize=True)[0]
    ranked = list(Article.objects.similar_to(query, k=8).defer(None))
    sims = [float(np.dot(qvec, np.asarray(r.embedding))) for r in ranked]
    assert sims == pytest.approx(sorted(sims, reverse=True), abs=1e-5)
    assert [r.similarity for r in ranked] == pytest.approx(sims, abs=1e-5)

    # 7. the users' model admin: semantic search box and similar items
    page = staff.get("/admin/testapp/article/", {"q": query})
    assert [a.pk for a in page.context["cl"].result_list] == [r.pk for r in ranked]
    page = staff.get(f"/admin/testapp/article/{rows[0].pk}/change/").content.decode()
    assert "Similar items" in page

    # 8. roll back to the base model: instant, from the kept vectors
    with django_capture_on_commit_callbacks(execute=True):
        select(staff, f"{ADMIN}/encoderversion/", "rollback", [candidate.pk])
    serving.forget_serving()
    assert serving.encoder_version("default") == base
    assert set(Article.objects.values_list("embedding_version", flat=True)) == {base}


def test_promotion_of_a_worse_candidate_is_refused_unless_a_superuser_forces_it(
    client, eager, django_capture_on_commit_callbacks
):
    TrainingPair.objects.bulk_create(
        [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS]
    )
    run = TrainingRun.objects.create(
        loss="mnrl",
        status=RunStatus.SUCCEEDED,
        base_version=serving.encoder_version("default"),
        metrics_before={"ndcg@10": 0.9, "recall@10": 1.0},
    )
    (serving.model_root() / "default").mkdir(parents=True)
    worse = EncoderVersion.objects.create(
        version="tiny-ft:worse", run=run, metrics={"ndcg@10": 0.5, "recall@10": 0.9}
    )
    client.force_login(user_with("staff", ALL))
    response = select(client, f"{ADMIN}/encoderversion/", "promote", [worse.pk], follow=True)
    page = response.content.decode()
    assert "worse than the active version" in page and "0.5000 vs active 0.9000" in page
    worse.refresh_from_db()
    assert worse.status == VersionStatus.CANDIDATE
    # a staff user cannot force it
    forced = select(client, f"{ADMIN}/encoderversion/", "promote_even_if_worse", [worse.pk])
    assert forced.status_code == 403
    # a superuser can (the promotion itself is not run here: no task is executed)
    client.force_login(User.objects.create_superuser("root", password="pw"))
    select(client, f"{ADMIN}/encoderversion/", "promote_even_if_worse", [worse.pk])
    worse.refresh_from_db()
    assert worse.status == VersionStatus.PROMOTING


def test_users_without_permissions_get_403_for_every_action(client):
    pair = TrainingPair.objects.create(text_a="a b", text_b="c d")
    run = TrainingRun.objects.create(loss="mnrl")
    version = EncoderVersion.objects.create(version="v:1")
    article = Article.objects.create(title="t")
    posts = [
        (f"{ADMIN}/trainingpair/", "fine_tune_encoder", pair.pk),
        (f"{ADMIN}/trainingrun/", "cancel", run.pk),
        (f"{ADMIN}/encoderversion/", "promote", version.pk),
        (f"{ADMIN}/encoderversion/", "rollback", version.pk),
        (f"{ADMIN}/encoderversion/", "promote_even_if_worse", version.pk),
        (f"{ADMIN}/encoderversion/", "stop_promotion", version.pk),
        ("/admin/testapp/article/", "reembed_selected", article.pk),
        ("/admin/testapp/article/", "make_training_pairs", article.pk),
        ("/admin/testapp/article/", "adapt_encoder", article.pk),
    ]
    gets = [f"{ADMIN}/trainingpair/import/", f"{ADMIN}/trainingrun/{run.pk}/status/"]
    viewers = ["view_trainingpair", "view_trainingrun", "view_encoderversion", "view_article"]
    for user in (user_with("nobody", []), user_with("viewer", viewers)):
        client.force_login(user)
        for url, action, pk in posts:
            response = select(client, url, action, [pk], confirm="yes")
            assert response.status_code == 403, (user.username, action)
        response = client.post(gets[0], {"file": csv_file(TOPICS)})
        assert response.status_code == 403
        assert client.get(gets[0]).status_code == 403
        expected = 403 if user.username == "nobody" else 200
        assert client.get(gets[1]).status_code == expected
    assert not TrainingPair.objects.exclude(pk=pair.pk).exists()
    assert TrainingRun.objects.get().status == RunStatus.QUEUED
    assert EncoderVersion.objects.get().status == VersionStatus.CANDIDATE


@pytest.mark.heavy
def test_reembed_selected_queues_forced_embedding(staff, eager):
    article = Article.objects.create(title="central bank raises interest rates")
    ref = indexing.get_ref("testapp.Article", "embedding")
    indexing.embed_stale(ref)
    Article.objects.filter(pk=article.pk).update(embedding_updated_at=None)
    response = select(staff, "/admin/testapp/article/", "reembed_selected", [article.pk])
    assert response.status_code == 302
    article.refresh_from_db()
    assert article.embedding_updated_at is not None  # written again although up to date


def test_fine_tuning_every_pair_across_pages_posts_one_field_not_one_per_pair(staff, settings):
    """ "Select all N pairs" (``select_across``) on a changelist: the confirmation page carries
    the flag, not every pk, so its POST stays under DATA_UPLOAD_MAX_NUMBER_FIELDS (Django
    answered 400 for the demo's 1,000 pairs), and the run trains on every pair the
    changelist's filters keep."""
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 40
    TrainingPair.objects.bulk_create(
        TrainingPair(text_a=f"{a} {n}", text_b=f"{b} {n}") for n in range(8) for a, b in TOPICS
    )  # 64 train pairs
    TrainingPair.objects.bulk_create(
        TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS
    )
    url = f"{ADMIN}/trainingpair/?split__exact=train"
    first = TrainingPair.objects.order_by("pk").first().pk
    page = select(staff, url, "fine_tune_encoder", [first], select_across="1")
    assert page.status_code == 200
    text = page.content.decode()
    assert "64 pairs selected: 64 train, 0 eval" in text
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', text)
    assert ("select_across", "1") in hidden and len(hidden) < 10, hidden
    fields = {
        "encoder": "default", "loss": "mnrl", "epochs": 1, "learning_rate": 2e-5,
        "batch_size": 8, "warmup_ratio": 0.1,
    }  # fmt: skip
    data = {**fields, **{name: value for name, value in hidden if name != "_selected_action"}}
    data["_selected_action"] = [value for name, value in hidden if name == "_selected_action"]
    response = staff.post(url, data)
    run = TrainingRun.objects.get()
    assert response.status_code == 302 and response.url.endswith(f"/trainingrun/{run.pk}/change/")
    train = TrainingPair.objects.filter(split="train").values_list("pk", flat=True)
    assert sorted(run.data["train"]) == sorted(train)


def test_cancel_action_stops_a_queued_run(staff):
    TrainingPair.objects.bulk_create([TrainingPair(text_a=a, text_b=b) for a, b in TOPICS])
    from django_sbert.finetuning import runs
    from django_sbert.finetuning.execution import execute_run
    from django_sbert.finetuning.options import Hyperparameters

    run = runs.create_run(
        "default",
        list(TrainingPair.objects.values_list("pk", flat=True)),
        hyperparameters=Hyperparameters(batch_size=4),
        enqueue=False,
    )
    page = staff.get(f"{ADMIN}/trainingrun/{run.pk}/change/").content.decode()
    assert f"trainingrun/{run.pk}/status/" in page  # the page polls while the run is active
    response = select(staff, f"{ADMIN}/trainingrun/", "cancel", [run.pk])
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert execute_run(run.pk) == RunStatus.CANCELLED
    assert not EncoderVersion.objects.exists()


def test_the_serving_version_cannot_be_deleted(staff):
    active = EncoderVersion.objects.create(version="v:active", status=VersionStatus.ACTIVE)
    old = EncoderVersion.objects.create(version="v:old", status=VersionStatus.RETIRED)
    assert (
        staff.post(f"{ADMIN}/encoderversion/{active.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert (
        staff.post(f"{ADMIN}/encoderversion/{old.pk}/delete/", {"post": "yes"}).status_code == 302
    )
    assert list(EncoderVersion.objects.values_list("version", flat=True)) == ["v:active"]


def test_pairs_and_adaptation_from_the_models_own_content(staff):
    Article.objects.bulk_create(Article(title=a, body=b) for a, b in TOPICS)
    Article.objects.create(title="no body")
    pks = list(Article.objects.values_list("pk", flat=True))
    response = select(staff, "/admin/testapp/article/", "make_training_pairs", pks)
    assert response.status_code == 302
    assert set(TrainingPair.objects.values_list("text_a", "text_b")) == set(TOPICS)
    response = select(staff, "/admin/testapp/article/", "adapt_encoder", pks[:1])
    run = TrainingRun.objects.get()
    assert response.status_code == 302 and response.url.endswith(f"/trainingrun/{run.pk}/change/")
    # The content default: pseudo-queries scored by a teacher fusing the model and BM25.
    assert run.loss == "margin_mse" and run.hyperparameters["batch_size"] == 8
    assert run.data == {"content": "testapp.Article.embedding", "eval": []}


def _unmeasured_candidate(route: str) -> EncoderVersion:
    """A candidate the gate cannot compare with the active version, by each route there is."""
    base = serving.encoder_version("default")
    if route == "content run":
        data = {"content": "testapp.Article.embedding"}
    else:
        pairs = TrainingPair.objects.bulk_create(
            [TrainingPair(text_a=a, text_b=b) for a, b in TOPICS]
        )
        data = {"train": [p.pk for p in pairs], "eval": []}
    run = TrainingRun.objects.create(
        loss="simcse" if route == "content run" else "mnrl",
        status=RunStatus.SUCCEEDED,
        base_version=base,
        data=data,
    )
    candidate = EncoderVersion.objects.create(version=f"tiny-ft:{route.replace(' ', '-')}", run=run)
    if route == "run deleted":  # EncoderVersion.run is SET_NULL
        run.delete()
    return candidate


@pytest.mark.parametrize(
    "route,reason",
    [
        ("run deleted", "run of this version was deleted"),
        ("no eval pairs", "had no eval pairs"),
        ("content run", "adapted to content"),
    ],
)
def test_a_candidate_the_gate_did_not_compare_is_promoted_by_superusers_only(client, route, reason):
    candidate = _unmeasured_candidate(route)
    url = f"{ADMIN}/encoderversion/"
    client.force_login(user_with("staff", ALL))
    page = select(client, url, "promote", [candidate.pk], follow=True).content.decode()
    assert "no evaluation" in page and reason in page, page
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    assert select(client, url, "promote_even_if_worse", [candidate.pk]).status_code == 403
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = select(client, url, "promote", [candidate.pk], follow=True).content.decode()
    assert "no evaluation" in page
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    page = select(client, url, "promote_even_if_worse", [candidate.pk], follow=True)
    assert "no evaluation" in page.content.decode()  # the success message says it was not compared
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.PROMOTING


def _failed_run_and_promotion() -> tuple[TrainingRun, EncoderVersion]:
    """A run that failed as ``execute_run`` records it, and a promotion that really failed
    (its version's model files are missing), as ``promotion.run_promotion`` records it."""
    from django_sbert.finetuning import promotion
    from django_sbert.finetuning.errors import describe_exception

    try:
        raise ValueError("the loss became NaN at step 7")
    except ValueError as exc:
        error = describe_exception(exc)
    run = TrainingRun.objects.create(loss="mnrl", status=RunStatus.FAILED, error=error)
    Article.objects.create(title="central bank raises interest rates")
    version = EncoderVersion.objects.create(
        version="tiny-ft:gone",
        directory="/nonexistent/tiny-ft-gone",
        status=VersionStatus.PROMOTING,
    )
    with pytest.raises(Exception):  # noqa: B017 - whatever loading missing files raises
        promotion.run_promotion(version.pk)
    version.refresh_from_db()
    assert "Traceback (most recent call last)" in version.promotion_error
    return run, version


def test_tracebacks_of_runs_and_promotions_are_for_superusers_only(client):
    run, version = _failed_run_and_promotion()
    run_message = "ValueError: the loss became NaN at step 7"
    version_message = version.promotion_error.split("\n\n")[0]
    assert version_message and "Traceback" not in version_message
    pages = [
        (f"{ADMIN}/trainingrun/{run.pk}/change/", run_message),
        (f"{ADMIN}/encoderversion/{version.pk}/change/", version_message),
    ]
    status_url = f"{ADMIN}/trainingrun/{run.pk}/status/"
    # staff with every permission: the message, no traceback
    client.force_login(user_with("staff", ALL))
    for url, message in pages:
        page = client.get(url).content.decode()
        assert html.escape(message.splitlines()[0]) in page, url  # the admin shows \n as <br>
        assert "Traceback" not in page and 'File "' not in page and "File &quot;" not in page
    assert client.get(status_url).json()["error"] == run_message
    # a superuser: the whole stored error
    client.force_login(User.objects.create_superuser("root", password="pw"))
    for url, _ in pages:
        page = client.get(url).content.decode()
        assert "Traceback (most recent call last)" in page, url
    assert client.get(status_url).json()["error"] == run.error


def test_run_and_version_pages_show_vector_keyword_and_hybrid_side_by_side(staff):
    def measured(vector: float, keyword: float, hybrid: float, tuned: float, **fusion) -> dict:
        return {
            "ndcg@10": vector,
            "recall@10": vector,
            "keyword_ndcg@10": keyword,
            "keyword_recall@10": keyword,
            "hybrid_ndcg@10": hybrid,
            "hybrid_recall@10": hybrid,
            "tuned_ndcg@10": tuned,
            "tuned_recall@10": tuned,
            "fusion_rrf_k": 30.0,
            "fusion_vector_weight": 1.0,
            "fusion_keyword_weight": 0.25,
            **fusion,
        }

    # After: tuned on 150 queries, it beat the settings' fusion on the other 150 and serves.
    candidate = {"method": "linear", "rrf_k": 1.0, "vector_weight": 0.7, "keyword_weight": 0.3}
    after = {
        **{f"fusion_{key}": value for key, value in candidate.items()},
        **{f"candidate_fusion_{key}": value for key, value in candidate.items()},
        "fusion_used": 1.0,
        "tuned_on_queries": 150.0,
        "heldout_queries": 150.0,
        "heldout_hybrid_ndcg@10": 0.6611,
        "heldout_tuned_ndcg@10": 0.6944,
    }
    run = TrainingRun.objects.create(
        loss="mnrl",
        status=RunStatus.SUCCEEDED,
        # Stored before linear fusion and the held-out check existed: no fusion_method (rrf),
        # and the fusion serves.
        metrics_before=measured(0.61, 0.52, 0.63, 0.64),
        metrics_after=measured(0.7111, 0.52, 0.6822, 0.7233, **after),
    )
    version = EncoderVersion.objects.create(version="v:tuned", run=run, metrics=run.metrics_after)
    run_page = staff.get(f"{ADMIN}/trainingrun/{run.pk}/change/").content.decode()
    assert "rrf, rrf_k 30, vector weight 1, keyword weight 0.25 (serves)" in run_page
    for url in (f"{ADMIN}/trainingrun/{run.pk}/change/", f"{ADMIN}/encoderversion/{version.pk}/"):
        page = staff.get(url if url.endswith("change/") else url + "change/").content.decode()
        assert "hybrid (settings&#x27; fusion)" in page and "hybrid (tuned fusion)" in page
        for figure in ("0.7111", "0.5200", "0.6822", "0.7233", "0.6611", "0.6944"):
            assert figure in page, (url, figure)
        assert "tuned fusion linear, vector weight 0.7, keyword weight 0.3" in page
        assert "on 150 queries it was not tuned on" in page
        assert "the tuned fusion serves" in page
    # A tuned fusion that lost on its held-out queries: shown, and the settings' serve.
    lost = {
        **{f"candidate_fusion_{key}": value for key, value in candidate.items()},
        "fusion_used": 0.0,
        "heldout_queries": 4.0,
        "keyword_ndcg@10": 0.5,
        "tuned_ndcg@10": 0.9,
    }
    version = EncoderVersion.objects.create(version="v:lost", metrics=lost)
    page = staff.get(f"{ADMIN}/encoderversion/{version.pk}/change/").content.decode()
    assert "4 held-out queries, too few to judge it" in page
    assert "the settings&#x27; serve" in page and "the tuned fusion serves" not in page
    bare = EncoderVersion.objects.create(version="v:bare", metrics={"ndcg@10": 0.5})
    page = staff.get(f"{ADMIN}/encoderversion/{bare.pk}/change/").content.decode()
    assert "hybrid (tuned fusion)" not in page  # nothing measured: "-"
