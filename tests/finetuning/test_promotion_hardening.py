"""Promotion and rollback when things go wrong: the history rollback follows, a gate measured
by the task and not the request, failures that give the version back, bulk loads that give
way to a promotion, hybrid figures measured where temporary tables are allowed.

Real parts: PostgreSQL (a read-only connection of its own for the replica case), the tiny
model, the file storage of MODEL_DIR (or one of the test's own), the admin and the API through
the test client; promotions run in this process with ``run_promotion``, what the Celery task
calls, or eagerly through the task itself.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission, User
from django.core.files.storage import FileSystemStorage
from django.db import connections
from rest_framework.test import APIClient

from django_sbert import serving
from django_sbert.exceptions import PromotionRefused, VersionUnavailable
from django_sbert.finetuning import promotion, recovery, tasks
from django_sbert.finetuning.hybrid import candidate_metrics
from django_sbert.indexing import bulk, bulk_load
from django_sbert.models import (
    EncoderVersion,
    PromotionKind,
    PromotionRecord,
    TrainingPair,
    TrainingRun,
    VersionStatus,
)
from tests.celery_app import app
from tests.serving.failing_storage import use_storage
from tests.testapp.models import Article, Note

pytestmark = pytest.mark.django_db

API = "/api/sbert"
ADMIN = "/admin/django_sbert"
PAIRS = [  # words of the tiny model's vocabulary
    ("central banks raise interest rates", "the economy is slow as rates rise"),
    ("cats and dogs", "a cat and a dog in the city"),
    ("guitar music", "a man is playing the guitar"),
    ("the election vote", "people vote for a new president"),
]


@pytest.fixture(autouse=True)
def quick(settings, tmp_path):
    """A MODEL_DIR of the test's own; switches do not wait for other processes' caches."""
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_DIR": str(tmp_path / "models"),
        "VERSION_CACHE_SECONDS": 0,
    }
    serving.forget_serving()
    yield
    serving.forget_serving()


def staff_with(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def trainer() -> User:
    return staff_with("trainer", "view_encoderversion", "change_encoderversion")


@pytest.fixture
def root() -> User:
    return User.objects.create_superuser("root", email=None, password="pw")


def serving_now() -> str:
    return serving.serving_record("default", max_age=0).version


def gated_candidate(name: str) -> EncoderVersion:
    """A version whose run measured the serving version (so the gate answers from stored
    figures) and found it better: the gate passes, nothing is encoded. No rows: nothing to
    stage, so no files are needed either."""
    run = TrainingRun.objects.create(
        loss="mnrl", status="succeeded", base_version=serving_now(), metrics_before={"ndcg@10": 0.5}
    )
    return EncoderVersion.objects.create(
        version=f"default:{name}", directory=f"default/{name}", run=run, metrics={"ndcg@10": 0.6}
    )


def active() -> str:
    return EncoderVersion.objects.get(encoder_name="default", status=VersionStatus.ACTIVE).version


# --- rollback follows the promotion history ------------------------------------------


@pytest.mark.urls("tests.api.urls")
def test_rollback_twice_goes_further_back_over_the_api(
    trainer, root, django_capture_on_commit_callbacks
):
    client = APIClient()
    client.force_authenticate(trainer)
    base = serving_now()

    def post(url: str, body: dict | None = None) -> dict:
        with django_capture_on_commit_callbacks(execute=False):
            response = client.post(url, body or {}, format="json")
        assert response.status_code == 202, response.content
        promotion.run_promotion(response.json()["id"])  # what the promotion task does
        return response.json()

    versions = []
    for name in ("v1", "v2", "v3"):
        version = gated_candidate(name)
        assert post(f"{API}/encoder-versions/{version.pk}/promote/")["gate"]["passed"] is True
        versions.append(version)
    v1, v2, v3 = versions
    assert active() == v3.version

    assert post(f"{API}/encoder-versions/{v3.pk}/rollback/")["version"] == v2.version
    assert active() == v2.version
    # Rolling back again goes to the version active before v2 was promoted, not forward to v3.
    assert post(f"{API}/encoder-versions/{v2.pk}/rollback/")["version"] == v1.version
    assert active() == v1.version
    assert post(f"{API}/encoder-versions/{v1.pk}/rollback/")["version"] == base

    history = list(
        PromotionRecord.objects.order_by("id").values_list(
            "from_version", "to_version", "kind", "username", "forced"
        )
    )
    assert history == [
        (base, v1.version, PromotionKind.PROMOTION, "trainer", False),
        (v1.version, v2.version, PromotionKind.PROMOTION, "trainer", False),
        (v2.version, v3.version, PromotionKind.PROMOTION, "trainer", False),
        (v3.version, v2.version, PromotionKind.ROLLBACK, "trainer", False),
        (v2.version, v1.version, PromotionKind.ROLLBACK, "trainer", False),
        (v1.version, base, PromotionKind.ROLLBACK, "trainer", False),
    ]
    # Nothing left to roll back to from the settings' model.
    base_row = EncoderVersion.objects.get(version=base)
    refused = client.post(f"{API}/encoder-versions/{base_row.pk}/rollback/")
    assert refused.status_code == 409, refused.content

    # A version a superuser forced past the gate: staff may not roll back to it.
    forced = EncoderVersion.objects.create(version="default:forced", directory="default/forced")
    root_client = APIClient()
    root_client.force_authenticate(root)
    with django_capture_on_commit_callbacks(execute=False):
        response = root_client.post(
            f"{API}/encoder-versions/{forced.pk}/promote/", {"force": True}, format="json"
        )
    assert response.status_code == 202, response.content
    promotion.run_promotion(forced.pk)
    after = gated_candidate("after-forced")
    post(f"{API}/encoder-versions/{after.pk}/promote/")
    denied = client.post(f"{API}/encoder-versions/{after.pk}/rollback/")
    assert denied.status_code == 403, denied.content
    assert "forced" in denied.json()["detail"]
    assert active() == after.version
    with django_capture_on_commit_callbacks(execute=False):
        allowed = root_client.post(f"{API}/encoder-versions/{after.pk}/rollback/")
    assert allowed.status_code == 202 and allowed.json()["version"] == forced.version


@pytest.mark.urls("tests.admin.urls")
def test_rollback_twice_goes_further_back_in_the_admin(
    client, trainer, django_capture_on_commit_callbacks
):
    client.force_login(trainer)
    changelist = f"{ADMIN}/encoderversion/"

    def act(action: str, version: EncoderVersion) -> str:
        data = {"action": action, "_selected_action": [str(version.pk)]}
        with django_capture_on_commit_callbacks(execute=False):
            page = client.post(changelist, data, follow=True).content.decode()
        promoting = EncoderVersion.objects.filter(status=VersionStatus.PROMOTING).first()
        if promoting is not None:
            promotion.run_promotion(promoting.pk)
        return page

    versions = []
    for name in ("v1", "v2", "v3"):  # each measured against the version serving before it
        versions.append(gated_candidate(name))
        act("promote", versions[-1])
    v1, v2, v3 = versions
    assert active() == v3.version
    assert f"Rolling back {v3.version} to {v2.version}" in act("rollback", v3)
    assert active() == v2.version
    assert f"Rolling back {v2.version} to {v1.version}" in act("rollback", v2)
    assert active() == v1.version
    # The version's page lists its switches.
    page = client.get(f"{ADMIN}/encoderversion/{v2.pk}/change/").content.decode()
    assert "Promotion history" in page
    assert f"{v3.version} &rarr; {v2.version} (rollback) by trainer" in page
    assert f"{v1.version} &rarr; {v2.version} (promotion) by trainer, undone" in page


# --- the gate in the task, failures give the version back ----------------


def eval_candidate(metrics: dict[str, float]) -> EncoderVersion:
    """A candidate whose run measured another version than the one serving: the gate has to
    encode the eval pairs with the serving version (and the distractors: none here)."""
    pairs = TrainingPair.objects.bulk_create(
        TrainingPair(text_a=a, text_b=b, split="eval") for a, b in PAIRS
    )
    run = TrainingRun.objects.create(
        loss="mnrl",
        status="succeeded",
        base_version="default:an-older-version",
        metrics_before={"ndcg@10": 0.1},
        data={"eval": [p.pk for p in pairs], "train": []},
    )
    return EncoderVersion.objects.create(
        version="default:measured", directory="default/measured", run=run, metrics=metrics
    )


@pytest.mark.urls("tests.api.urls")
def test_the_promote_request_answers_at_once_without_encoding(
    trainer, django_capture_on_commit_callbacks
):
    # The serving version's files are nowhere: measuring it in the request would fail (503).
    EncoderVersion.objects.create(
        version="default:serving-elsewhere", directory="default/nowhere", status="active"
    )
    candidate = eval_candidate({"ndcg@10": 0.9})
    client = APIClient()
    client.force_authenticate(trainer)
    with django_capture_on_commit_callbacks(execute=False) as sent:
        response = client.post(f"{API}/encoder-versions/{candidate.pk}/promote/")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "promoting" and len(sent) == 1  # the task, sent after COMMIT
    assert body["gate"]["state"] == "pending" and body["gate"]["passed"] is None

    # The task measures, cannot load the serving version, and gives the candidate back.
    with pytest.raises(VersionUnavailable):
        promotion.run_promotion(candidate.pk)
    shown = client.get(f"{API}/encoder-versions/{candidate.pk}/").json()
    assert shown["status"] == "candidate"
    assert shown["promotion_error"].startswith("VersionUnavailable")


@pytest.fixture
def eager():
    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


@pytest.mark.urls("tests.admin.urls")
def test_the_gate_runs_in_the_task_with_progress_and_its_verdict(
    client, trainer, eager, django_capture_on_commit_callbacks
):
    client.force_login(trainer)
    candidate = eval_candidate({"ndcg@10": 0.0, "recall@10": 0.0})  # worse than anything
    page_url = f"{ADMIN}/encoderversion/{candidate.pk}/change/"
    data = {"action": "promote", "_selected_action": [str(candidate.pk)]}
    with django_capture_on_commit_callbacks(execute=False) as sent:
        answer = client.post(f"{ADMIN}/encoderversion/", data, follow=True).content.decode()
    assert "measures it against the active version first" in answer
    assert "evaluation gate: waiting for a worker" in client.get(page_url).content.decode()

    sent[0]()  # the promotion task, eagerly: the gate refuses with the numbers
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    assert candidate.promotion_error.startswith("Refused by the evaluation gate")
    assert "ndcg@10: candidate 0.0000 vs active" in candidate.promotion_error
    assert candidate.promotion_request["gate"] == "refused"
    assert candidate.promotion_request["gate_step"] == [3, 3]
    assert "Refused by the evaluation gate" in client.get(page_url).content.decode()

    # Better than the serving version: the task measures, passes and switches.
    EncoderVersion.objects.filter(pk=candidate.pk).update(metrics={"ndcg@10": 1.0})
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"{ADMIN}/encoderversion/", data)
    assert active() == candidate.version
    record = PromotionRecord.objects.get(to_version=candidate.version)
    assert record.gate.startswith("ndcg@10: candidate 1.0000 vs active") and not record.forced


@pytest.fixture
def storage_site(settings, tmp_path):
    """A model storage of the test's own and an empty MODEL_CACHE: a fresh host."""
    store = tmp_path / "model-storage"
    use_storage(settings, store, FileSystemStorage, tmp_path / "empty-cache")
    yield store
    serving.reset_encoders()


@pytest.mark.urls("tests.api.urls")
def test_a_version_altered_in_storage_is_given_back_with_its_error(storage_site, trainer):
    from tests.tiny_model import moved_tiny_encoder

    Article.objects.bulk_create(Article(title=a, body=b) for a, b in PAIRS)
    tuned = moved_tiny_encoder(django_settings.TINY_MODEL_DIR, seed=11)
    key, version = serving.save_encoder(tuned, "default", serving.base_label("default"))
    weights = Path(storage_site) / key / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # altered after upload, same size
    weights.write_bytes(bytes(data))
    candidate = EncoderVersion.objects.create(version=version, directory=key)
    base = serving_now()

    with pytest.raises(VersionUnavailable):
        promotion.start_promotion(candidate, force=True, run_now=True)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    assert "VersionUnavailable" in candidate.promotion_error
    assert serving_now() == base and not PromotionRecord.objects.exists()
    client = APIClient()
    client.force_authenticate(trainer)
    shown = client.get(f"{API}/encoder-versions/{candidate.pk}/").json()
    assert shown["status"] == "candidate" and "sha256" in shown["promotion_error"]

    # Queued: the worker (the task, eagerly) gives it back the same way.
    promotion.start_promotion(candidate, force=True, run_now=False)
    with pytest.raises(VersionUnavailable):
        tasks.promote_version.apply(args=(candidate.pk,), throw=True)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE and candidate.promotion_error


def test_the_sweep_gives_a_promotion_up_after_its_resends(settings):
    settings.SBERT = {
        **settings.SBERT,
        "TRAINING": {**settings.SBERT.get("TRAINING", {}), "STALLED_SECONDS": 0},
    }
    version = EncoderVersion.objects.create(
        version="default:lost", directory="default/lost", status=VersionStatus.PROMOTING
    )
    most = 3
    assert most == recovery.PROMOTION_RESENDS
    claims = [recovery.lost_promotions() for _ in range(most + 2)]
    assert claims == [[version.pk]] * most + [[], []]
    version.refresh_from_db()
    assert version.status == VersionStatus.CANDIDATE
    assert version.promotion_error.startswith(f"Given up: no progress after {most} re-sends")


# --- bulk_load() and a promotion -------------------------------------------------------


def test_bulk_load_is_refused_while_a_version_is_promoted(tiny_encoder):
    EncoderVersion.objects.create(
        version="default:next", directory="default/next", status=VersionStatus.PROMOTING
    )
    notes = [Note(text="a cat and a dog") for _ in range(3)]
    with pytest.raises(PromotionRefused, match="being promoted"):
        bulk_load(notes, tiny_encoder.encode([n.text for n in notes]))
    assert not Note.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_long_bulk_load_does_not_hold_up_the_switch(tiny_encoder, monkeypatch):
    monkeypatch.setattr(bulk, "COPY_CHUNK_ROWS", 20, raising=False)
    rows, per_row = 300, 0.02  # six seconds of COPY
    started = threading.Event()

    def slow_text() -> str:  # the source text of a row, built slowly while COPY runs
        started.set()
        time.sleep(per_row)
        return "a cat and a dog"

    notes = [Note(text="a cat and a dog") for _ in range(rows)]
    for note in notes:
        note.embedding_text = slow_text
    vectors = tiny_encoder.encode(["a cat and a dog"] * rows)
    outcome: dict[str, object] = {}

    def load() -> None:
        try:
            outcome["rows"] = bulk_load(notes, vectors)
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connections.close_all()

    loader = threading.Thread(target=load)
    loader.start()
    assert started.wait(10)
    target = EncoderVersion.objects.create(
        version="default:next", directory="default/next", status=VersionStatus.PROMOTING
    )
    began = time.monotonic()
    promotion.switch(target)  # nothing staged, no rows: only the lock and the flip
    waited = time.monotonic() - began
    loader.join(30)
    assert waited < rows * per_row / 2, f"the switch waited {waited:.1f} s behind the COPY"
    assert isinstance(outcome.get("error"), PromotionRefused), outcome
    assert not Note.objects.exists()  # the load wrote nothing


# --- hybrid figures when reads go to a read-only database ----------------------------


READ_ONLY = "readonly"


@pytest.fixture(scope="module")
def read_only_alias(django_db_setup, django_db_blocker):
    """The test database again, through connections that refuse writes (as a replica does)."""
    default = connections["default"].settings_dict
    options = {**default.get("OPTIONS", {}), "options": "-c default_transaction_read_only=on"}
    connections.settings[READ_ONLY] = {
        **default,
        "OPTIONS": options,
        "TEST": {**default["TEST"], "MIRROR": "default"},
    }
    yield READ_ONLY
    connections[READ_ONLY].close()
    del connections[READ_ONLY]
    del connections.settings[READ_ONLY]


class ReadOnlyReplicaRouter:
    def db_for_read(self, model, **hints):
        return READ_ONLY

    def db_for_write(self, model, **hints):
        return "default"


@pytest.mark.django_db(databases=["default", READ_ONLY])
def test_hybrid_metrics_tune_the_fusion_when_reads_go_to_a_read_only_replica(
    read_only_alias, settings, tiny_encoder
):
    settings.DATABASE_ROUTERS = [f"{__name__}.ReadOnlyReplicaRouter"]
    # It is read-only: no temporary table there.
    with pytest.raises(Exception, match="read-only"), connections[READ_ONLY].cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE sbert_probe (id int)")
    connections[READ_ONLY].close()
    pairs = [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in PAIRS]
    metrics = candidate_metrics(tiny_encoder, pairs, "default")
    assert "hybrid_error" not in metrics, metrics.get("hybrid_error")
    assert {"keyword_ndcg@10", "tuned_ndcg@10", "candidate_fusion_method"} <= set(metrics)
