"""pairs/, training-runs/ and encoder-versions/: permissions, validation and the workflow.

The workflow test drives the real code end to end with the tiny model: pairs posted over HTTP,
a run created over HTTP and executed by the same function the Celery task calls, the candidate
promoted over HTTP and its vectors switched in, then rolled back.
"""

from __future__ import annotations

import numpy as np
import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from django_sbert import serving
from django_sbert.finetuning import promotion
from django_sbert.finetuning.execution import execute_run
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

API = "/api/sbert"
MODELS = ("trainingpair", "trainingrun", "encoderversion")
PAIRS = [  # words of the tiny model's vocabulary
    ("central banks raise interest rates", "the economy is slow as rates rise"),
    ("interest rates fall", "money is cheap and the market is high"),
    ("tax and the government", "the minister and the tax on prices"),
    ("cats and dogs", "a cat and a dog in the city"),
    ("the dog runs fast", "a big dog is running in the country"),
    ("guitar music", "a man is playing the guitar"),
    ("the election vote", "people vote for a new president"),
    ("court and law", "the court and the new law"),
]


@pytest.fixture(autouse=True)
def _model_dir(settings, tmp_path):
    settings.SBERT = {**settings.SBERT, "MODEL_DIR": str(tmp_path / "models")}


def _user(name: str, *, staff: bool, actions: tuple[str, ...] = ()) -> User:
    user = User.objects.create_user(name, is_staff=staff)
    codenames = [f"{action}_{model}" for action in actions for model in MODELS]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def roles(db) -> dict[str, User | None]:
    return {
        "anonymous": None,
        "user": _user("user", staff=False),
        "staff": _user("staff", staff=True),
        "staff_viewer": _user("staff_viewer", staff=True, actions=("view",)),
        "perms_not_staff": _user(
            "perms_not_staff", staff=False, actions=("view", "add", "change", "delete")
        ),
        "trainer": _user("trainer", staff=True, actions=("view", "add", "change", "delete")),
        "superuser": User.objects.create_superuser("root", email=None, password=None),
    }


def _client(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def pairs(db) -> list[TrainingPair]:
    rows = [TrainingPair(text_a=a, text_b=b) for a, b in PAIRS]
    rows += [TrainingPair(text_a=b, text_b=a, split="eval") for a, b in PAIRS[:4]]
    return TrainingPair.objects.bulk_create(rows)


@pytest.fixture
def run(pairs) -> TrainingRun:
    return TrainingRun.objects.create(loss="mnrl", data={"train": [p.pk for p in pairs]})


@pytest.fixture
def version(run) -> EncoderVersion:
    return EncoderVersion.objects.create(version="default:candidate", directory="", run=run)


# Each request, and the permission it needs beyond being staff.
def _requests(pairs, run, version) -> list[tuple[str, str, dict | list | None, str]]:
    return [
        ("get", f"{API}/pairs/", None, "view"),
        ("get", f"{API}/pairs/{pairs[0].pk}/", None, "view"),
        ("post", f"{API}/pairs/", {"text_a": "a cat", "text_b": "a dog"}, "add"),
        ("delete", f"{API}/pairs/{pairs[1].pk}/", None, "delete"),
        ("get", f"{API}/training-runs/", None, "view"),
        ("get", f"{API}/training-runs/{run.pk}/", None, "view"),
        ("post", f"{API}/training-runs/", {"pairs": [p.pk for p in pairs[:4]]}, "add"),
        ("post", f"{API}/training-runs/{run.pk}/cancel/", None, "change"),
        ("get", f"{API}/encoder-versions/", None, "view"),
        ("get", f"{API}/encoder-versions/{version.pk}/", None, "view"),
        ("post", f"{API}/encoder-versions/{version.pk}/promote/", {}, "change"),
        ("post", f"{API}/encoder-versions/{version.pk}/rollback/", None, "change"),
    ]


ALLOWED = {  # role -> the permissions it holds (anonymous and non-staff hold none that count)
    "anonymous": set(),
    "user": set(),
    "staff": set(),
    "staff_viewer": {"view"},
    "perms_not_staff": set(),
    "trainer": {"view", "add", "change", "delete"},
    "superuser": {"view", "add", "change", "delete"},
}


@pytest.mark.parametrize("role", list(ALLOWED))
def test_permission_matrix(roles, pairs, run, version, role):
    client = _client(roles[role])
    for method, url, body, needs in _requests(pairs, run, version):
        response = getattr(client, method)(url, body, format="json")
        label = f"{role} {method.upper()} {url}"
        if needs in ALLOWED[role]:
            assert response.status_code != 403, (label, response.content)
            assert response.status_code < 500, (label, response.content)
        else:
            assert response.status_code == 403, (label, response.status_code, response.content)


@pytest.mark.parametrize(
    "method,path",
    [
        ("put", "pairs/{pair}/"),
        ("patch", "pairs/{pair}/"),
        ("delete", "training-runs/{run}/"),
        ("put", "training-runs/{run}/"),
        ("delete", "encoder-versions/{version}/"),
        ("post", "encoder-versions/"),
    ],
)
def test_methods_that_do_not_exist_are_405(roles, pairs, run, version, method, path):
    url = f"{API}/" + path.format(pair=pairs[0].pk, run=run.pk, version=version.pk)
    assert getattr(_client(roles["superuser"]), method)(url, {}, format="json").status_code == 405


def test_pairs_create_one_or_many_list_filter_and_delete(roles):
    client = _client(roles["trainer"])
    one = client.post(f"{API}/pairs/", {"text_a": "a cat", "text_b": "a dog"}, format="json")
    assert one.status_code == 201, one.content
    assert one.json()["split"] == "train"
    many = client.post(
        f"{API}/pairs/",
        [
            {"text_a": "guitar", "text_b": "music", "score": 0.8, "source": "faq"},
            {"text_a": "the vote", "text_b": "the election", "split": "eval", "source": "faq"},
        ],
        format="json",
    )
    assert many.status_code == 201, many.content
    assert len(many.json()) == 2
    assert TrainingPair.objects.count() == 3
    listed = client.get(f"{API}/pairs/?source=faq&split=eval").json()
    assert [row["text_a"] for row in listed["results"]] == ["the vote"]
    assert client.get(f"{API}/pairs/?page_size=2").json()["count"] == 3
    misspelt = client.get(f"{API}/pairs/?split=evl")  # not an empty list, as if none
    assert misspelt.status_code == 400 and "train, eval" in misspelt.json()["split"][0]
    assert _client(roles["staff"]).get(f"{API}/pairs/?split=evl").status_code == 403  # perms first
    assert client.get(f"{API}/pairs/{one.json()['id']}/?split=evl").status_code == 200  # list only
    pk = one.json()["id"]
    assert client.delete(f"{API}/pairs/{pk}/").status_code == 204
    assert not TrainingPair.objects.filter(pk=pk).exists()


@pytest.mark.parametrize(
    "body,field",
    [
        ({"text_a": "a cat"}, "text_b"),
        ({"text_a": "   ", "text_b": "a dog"}, "text_a"),
        ({"text_a": "a", "text_b": "b", "score": 1.5}, "score"),
        ({"text_a": "a", "text_b": "b", "split": "test"}, "split"),
        ({"text_a": ["a"], "text_b": "b"}, "text_a"),
        ({"text_a": "a", "text_b": "b", "lable": 1}, "lable"),
    ],
)
def test_bad_pairs_are_400_naming_the_field(roles, body, field):
    response = _client(roles["trainer"]).post(f"{API}/pairs/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert TrainingPair.objects.count() == 0


def test_a_list_with_one_bad_pair_saves_nothing(roles):
    body = [{"text_a": "a", "text_b": "b"}, {"text_a": "a"}]
    response = _client(roles["trainer"]).post(f"{API}/pairs/", body, format="json")
    assert response.status_code == 400
    assert response.json() == {"1": {"text_b": ["This field is required."]}}  # by list index
    assert TrainingPair.objects.count() == 0
    empty = _client(roles["trainer"]).post(f"{API}/pairs/", [], format="json")
    assert empty.status_code == 400


@pytest.mark.parametrize(
    "body,message",
    [
        ({"epochs": 0}, "epochs"),
        ({"learning_rate": -1}, "learning_rate"),
        ({"loss": "hinge"}, "loss"),
        ({"pairs": [999999]}, "No training pairs match"),
        ({"content": "testapp.Article.embedding", "pairs": [1]}, "either content or pairs"),
        ({"encoder": "nope"}, "nope"),
        ({"loss": "cosine"}, "score"),  # positive pairs have no score to regress to
        ({"pair": [1]}, "Unknown field"),  # a typo of pairs: not a run on every pair
        ({"epoch": 2}, "Unknown field"),
    ],
)
def test_bad_runs_are_400_and_queue_nothing(roles, pairs, body, message):
    response = _client(roles["trainer"]).post(f"{API}/training-runs/", body, format="json")
    assert response.status_code == 400, response.content
    assert message in response.content.decode()
    assert TrainingRun.objects.count() == 0


def test_a_second_run_of_the_same_encoder_is_409(roles, pairs):
    client = _client(roles["trainer"])
    first = client.post(f"{API}/training-runs/", {}, format="json")
    assert first.status_code == 201, first.content
    assert first.json()["loss"] == "mnrl"  # positive pairs only
    assert first.json()["status"] == "queued"
    second = client.post(f"{API}/training-runs/", {}, format="json")
    assert second.status_code == 409
    assert "already queued or running" in second.json()["detail"]
    cancelled = client.post(f"{API}/training-runs/{first.json()['id']}/cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    again = client.post(f"{API}/training-runs/{first.json()['id']}/cancel/")
    assert again.status_code == 409


def test_force_is_for_superusers_only(roles, version):
    response = _client(roles["trainer"]).post(
        f"{API}/encoder-versions/{version.pk}/promote/", {"force": True}, format="json"
    )
    assert response.status_code == 403
    assert EncoderVersion.objects.get(pk=version.pk).status == "candidate"


def test_an_unknown_promote_option_is_400_and_promotes_nothing(roles, version):
    response = _client(roles["superuser"]).post(
        f"{API}/encoder-versions/{version.pk}/promote/", {"froce": True}, format="json"
    )
    assert response.status_code == 400 and "froce" in response.json()
    assert EncoderVersion.objects.get(pk=version.pk).status == "candidate"


def test_gate_refusal_is_409_with_the_numbers(roles, run):
    run.metrics_before = {"ndcg@10": 0.9}
    run.base_version = serving.serving_version("default")
    run.save()
    worse = EncoderVersion.objects.create(
        version="default:worse", directory="", run=run, metrics={"ndcg@10": 0.5}
    )
    response = _client(roles["trainer"]).post(f"{API}/encoder-versions/{worse.pk}/promote/")
    assert response.status_code == 409
    assert "0.5000" in response.json()["detail"] and "0.9000" in response.json()["detail"]
    assert EncoderVersion.objects.get(pk=worse.pk).status == "candidate"


def test_rolling_back_a_version_that_is_not_active_is_409(roles, version):
    response = _client(roles["trainer"]).post(f"{API}/encoder-versions/{version.pk}/rollback/")
    assert response.status_code == 409
    assert "not active" in response.json()["detail"]


@pytest.mark.heavy
def test_workflow_train_promote_rollback(roles, settings, django_capture_on_commit_callbacks):
    from django_sbert.serving import get_encoder, serving_record

    def encoder_version(name: str) -> str:  # what a process sees once its cache expires
        return serving_record(name, max_age=0).version

    from django_sbert.fields import embedding_fields
    from django_sbert.indexing import embed_pks, field_refs

    settings.SBERT = {**settings.SBERT, "AUTO_EMBED": False}
    client = _client(roles["superuser"])
    body = [{"text_a": a, "text_b": b} for a, b in PAIRS]
    body += [{"text_a": b, "text_b": a, "split": "eval"} for a, b in PAIRS[:4]]
    assert client.post(f"{API}/pairs/", body, format="json").status_code == 201
    articles = [Article.objects.create(title=a, body=b) for a, b in PAIRS]
    field = embedding_fields(Article)[0]
    embed_pks(field_refs(Article)[0], [a.pk for a in articles])
    base = encoder_version("default")

    created = client.post(
        f"{API}/training-runs/",
        {"loss": "mnrl", "epochs": 1, "batch_size": 4, "learning_rate": 1e-3},
        format="json",
    )
    assert created.status_code == 201, created.content
    run_id = created.json()["id"]
    execute_run(run_id)  # what the Celery task on the training queue does
    run = client.get(f"{API}/training-runs/{run_id}/").json()
    assert run["status"] == RunStatus.SUCCEEDED, run["error"]
    assert run["step"] == run["total_steps"] > 0 and run["progress"] == 1.0
    assert run["loss_history"] and "ndcg@10" in run["metrics_after"]
    # Options not sent: the default recipe's (mined negatives, early stopping on the eval
    # pairs); the representation carries the evaluations and the kept step.
    assert run["hyperparameters"]["hard_negatives"] and run["hyperparameters"]["patience"] == 3
    evaluations = run["evaluations"]
    assert evaluations["metric"] == "ndcg@10" and evaluations["history"][0][0] == 0
    assert run["metrics_after"]["ndcg@10"] == evaluations["best_metric"]
    candidate = EncoderVersion.objects.get(version=run["candidate"])

    with django_capture_on_commit_callbacks(execute=False):
        promoted = client.post(
            f"{API}/encoder-versions/{candidate.pk}/promote/", {"force": True}, format="json"
        )
    assert promoted.status_code == 202, promoted.content
    assert promoted.json()["status"] == "promoting"
    assert encoder_version("default") == base  # nothing switches before the vectors are ready
    promotion.run_promotion(candidate.pk)  # what the promotion task does
    listed = client.get(f"{API}/encoder-versions/?status=active").json()["results"]
    assert client.get(f"{API}/encoder-versions/?status=actve").status_code == 400
    assert [row["version"] for row in listed] == [candidate.version]
    assert encoder_version("default") == candidate.version
    stored = np.array(Article.objects.get(pk=articles[0].pk).embedding)
    expected = get_encoder("default", candidate.version).encode(
        [field.get_source_text(articles[0])]
    )
    np.testing.assert_allclose(stored, expected[0], atol=1e-5)

    with django_capture_on_commit_callbacks(execute=False):
        rolled = client.post(f"{API}/encoder-versions/{candidate.pk}/rollback/")
    assert rolled.status_code == 202, rolled.content
    promotion.run_promotion(rolled.json()["id"])
    assert encoder_version("default") == base
    assert getattr(Article.objects.get(pk=articles[0].pk), field.version_field_name) == base


@pytest.mark.parametrize(
    "content,message",
    [("nope.Missing.embedding", "nope.Missing"), ("testapp.Article.nothing", "nothing")],
)
def test_unknown_content_target_is_400(roles, content, message):
    response = _client(roles["trainer"]).post(
        f"{API}/training-runs/", {"content": content}, format="json"
    )
    assert response.status_code == 400, response.content
    (text,) = response.json()["content"]
    assert message in text
    assert text.count("'") % 2 == 0, text  # names quoted whole, none cut


def _unmeasured_candidate(route: str, pairs: list[TrainingPair]) -> EncoderVersion:
    """A candidate the gate cannot compare with the active version, by each route there is."""
    base = serving.serving_version("default")
    if route == "content run":
        run = TrainingRun.objects.create(
            loss="simcse", base_version=base, data={"content": "testapp.Article.embedding"}
        )
    else:  # a run on train pairs only: it measured nothing
        run = TrainingRun.objects.create(
            loss="mnrl", base_version=base, data={"train": [p.pk for p in pairs], "eval": []}
        )
    candidate = EncoderVersion.objects.create(
        version=f"default:{route.replace(' ', '-')}", directory="", run=run
    )
    if route == "run deleted":  # EncoderVersion.run is SET_NULL
        run.delete()
        candidate.refresh_from_db()
        assert candidate.run is None
    return candidate


UNMEASURED = {
    "run deleted": "run of this version was deleted",
    "no eval pairs": "had no eval pairs",
    "content run": "adapted to content",
}


@pytest.mark.parametrize("route", list(UNMEASURED))
def test_a_candidate_the_gate_did_not_compare_needs_a_superuser(roles, pairs, route):
    candidate = _unmeasured_candidate(route, pairs)
    url = f"{API}/encoder-versions/{candidate.pk}/promote/"
    # staff with the change permission: refused, with the reason
    refused = _client(roles["trainer"]).post(url, {}, format="json")
    assert refused.status_code == 409, refused.content
    detail = refused.json()["detail"]
    assert "no evaluation" in detail and UNMEASURED[route] in detail, detail
    assert "superuser may force" in detail
    assert _client(roles["trainer"]).post(url, {"force": True}, format="json").status_code == 403
    # a superuser too, unless forcing
    assert _client(roles["superuser"]).post(url, {}, format="json").status_code == 409
    assert EncoderVersion.objects.get(pk=candidate.pk).status == "candidate"
    forced = _client(roles["superuser"]).post(url, {"force": True}, format="json")
    assert forced.status_code == 202, forced.content
    assert forced.json()["status"] == "promoting"
    assert forced.json()["gate"]["passed"] is False
    assert forced.json()["gate"]["detail"].startswith("no evaluation: ")


def test_tracebacks_of_runs_and_promotions_are_for_superusers_only(roles, pairs):
    from django_sbert.finetuning.errors import describe_exception

    try:
        raise ValueError("the loss became NaN at step 7")
    except ValueError as exc:
        error = describe_exception(exc)
    failed = TrainingRun.objects.create(loss="mnrl", status=RunStatus.FAILED, error=error)
    Article.objects.create(title=PAIRS[0][0])
    version = EncoderVersion.objects.create(
        version="default:gone", directory="/nonexistent/default-gone", status="promoting"
    )
    with pytest.raises(Exception):  # noqa: B017 - whatever loading missing files raises
        promotion.run_promotion(version.pk)  # records promotion_error, as the task does
    stored = EncoderVersion.objects.get(pk=version.pk).promotion_error
    assert "Traceback (most recent call last)" in stored

    def seen(user: User) -> list[str]:
        client = _client(user)
        runs_seen = [client.get(f"{API}/training-runs/{failed.pk}/").json()["error"]]
        runs_seen += [r["error"] for r in client.get(f"{API}/training-runs/").json()["results"]]
        versions_seen = [
            client.get(f"{API}/encoder-versions/{version.pk}/").json()["promotion_error"]
        ]
        versions_seen += [
            v["promotion_error"]
            for v in client.get(f"{API}/encoder-versions/").json()["results"]
            if v["id"] == version.pk
        ]
        return runs_seen + versions_seen

    for text in seen(roles["trainer"]):
        assert "Traceback" not in text and 'File "' not in text, text
    assert (
        seen(roles["trainer"])
        == [
            "ValueError: the loss became NaN at step 7",
        ]
        * 2
        + [stored.split("\n\n")[0]] * 2
    )
    assert seen(roles["superuser"]) == [error] * 2 + [stored] * 2


def test_a_content_run_takes_the_adapt_recipe_and_only_the_values_sent(roles):
    Article.objects.bulk_create(
        Article(title=f"story number {i} of the day", body=f"The body of story {i} is here.")
        for i in range(6)
    )
    client = _client(roles["trainer"])
    made = client.post(
        f"{API}/training-runs/", {"content": "testapp.Article.embedding"}, format="json"
    )
    assert made.status_code == 201, made.content
    run = TrainingRun.objects.get(pk=made.json()["id"])
    assert run.loss == "margin_mse" and run.hyperparameters["learning_rate"] == 2e-5
    assert run.hyperparameters["epochs"] == 1 and run.hyperparameters["batch_size"] == 8
    run.delete()  # frees the encoder's slot for the next run
    made = client.post(
        f"{API}/training-runs/",
        {"content": "testapp.Article.embedding", "loss": "mnrl", "epochs": 2},
        format="json",
    )
    assert made.status_code == 201, made.content
    run = TrainingRun.objects.get(pk=made.json()["id"])
    assert run.loss == "mnrl" and run.hyperparameters["learning_rate"] == 5e-5  # the recipe's
    assert run.hyperparameters["epochs"] == 2  # a value sent wins
