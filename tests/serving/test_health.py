"""The readiness view, in this process and behind a real gunicorn with two worker processes.

gunicorn runs ``tests/web_app`` with the hooks of ``django_sbert.contrib.gunicorn`` (system
checks in the master, encoders warmed in each worker before its first request), as one web
host: its own model cache, the model storage this test process writes (the training side).
Shown: every process is ready at its first request; a promotion is pre-loaded while it stages
and every process serves and reports the new version soon after the switch; a version the host
cannot verify makes the view answer 503 with the reason and stops a new gunicorn from starting.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import Request, urlopen

import pytest
from django.conf import global_settings
from django.contrib.auth.models import User

from django_sbert import indexing, serving
from django_sbert.finetuning import promotion
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.serving.warmup import forget_warm_state, warm
from tests.testapp.models import Article
from tests.worker_process import LoggedProcess, test_database_url

ROOT = Path(__file__).resolve().parents[2]
TITLES = ["central bank raises rates", "football team wins", "storm closes schools"]
HEALTH_TOKEN = "Bearer web-app-health-token-for-tests"


# --- in this process ---------------------------------------------------------------------------


@pytest.fixture
def cold_process() -> Iterator[None]:
    forget_warm_state()
    yield
    forget_warm_state()


@pytest.mark.django_db
@pytest.mark.urls("django_sbert.urls")
def test_the_view_is_503_until_this_process_warmed_the_serving_version(client, cold_process):
    client.force_login(User.objects.create_user("operator", is_staff=True))  # reads the details
    response = client.get("/health/")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database:default"] == "ok"
    version = serving.serving_version("default")
    assert body["checks"]["encoder:default"].startswith(f"serves {version}, not warmed")

    state = warm(["default"], role="query")["default"]
    response = client.get("/health/")
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "status": "ok",
        "checks": {"database:default": "ok", "encoder:default": "ok"},
        "versions": {"default": version},
        # The path this process runs and why, as sbert_status prints it.
        "paths": {"default": {"path": state.path, "reason": state.reason}},
        "fetch_failures": [],  # versions this process failed to fetch (none)
        "encoding": {"layout": "in-process"},  # no query server: this process encodes
        "pid": os.getpid(),
    }
    assert state.path.split()[0] in ("compiled", "eager") and state.reason
    assert response["Cache-Control"].startswith("max-age=0")


def test_the_search_database_is_one_the_view_checks():
    """SBERT["SEARCH"]["DATABASE"] sends searches to a replica the router may not name: the view
    (and check W030) must cover it too."""
    from django.test import override_settings

    from django_sbert.serving.health import serving_databases

    assert serving_databases() == ["default"]
    with override_settings(SBERT={"SEARCH": {"DATABASE": "replica"}}):
        assert serving_databases() == ["default", "replica"]


# --- behind gunicorn ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Gunicorn(LoggedProcess):
    """``gunicorn -c tests/web_app/gunicorn.conf.py`` on a free port: one web host."""

    name = "gunicorn"

    def __init__(self, log: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = log.open("ab")
        command = [
            sys.executable, "-m", "gunicorn", "-c", "tests/web_app/gunicorn.conf.py",
            "-b", f"127.0.0.1:{self.port}",
        ]  # fmt: skip
        environment = {**os.environ, "DATABASE_URL": test_database_url(), **env}
        environment["DJANGO_SETTINGS_MODULE"] = "tests.web_app.settings"
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait_for_log(self, text: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.output().count(text) < count:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited:\n{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"gunicorn never logged {text!r}:\n{self.output()[-4000:]}")
            time.sleep(0.1)

    def get(self, path: str, **params: Any) -> tuple[int, Any]:
        query = f"?{urlencode(params)}" if params else ""
        # The health view's details need the token (tests/web_app/settings.py).
        request = Request(f"{self.url}{path}{query}", headers={"Authorization": HEALTH_TOKEN})
        try:
            with urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture
def web_host(settings, tmp_path) -> Iterator[Callable[[str], Gunicorn]]:
    """Start gunicorn hosts on the storage this process writes; each host has its own cache."""
    store = tmp_path / "training-writes-here"
    settings.STORAGES = {
        **global_settings.STORAGES,
        "sbert_models": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(store)},
        },
    }
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_STORAGE": "sbert_models",
        "MODEL_CACHE": str(tmp_path / "training-side-cache"),
        "VERSION_CACHE_SECONDS": 1.0,  # promotions wait this long before the switch
    }
    serving.forget_serving()
    serving.reset_encoders()
    hosts: list[Gunicorn] = []

    def start(name: str, **extra: str) -> Gunicorn:
        env = {
            **extra,
            "SBERT_TEST_STORAGE_OPTIONS": json.dumps({"location": str(store)}),
            "SBERT_TEST_MODEL_CACHE": str(tmp_path / f"{name}-cache"),
            "SBERT_TEST_VERSION_CACHE_SECONDS": "0.2",
        }
        hosts.append(Gunicorn(tmp_path / f"{name}.log", env))
        return hosts[-1]

    yield start
    for host in hosts:
        host.stop()
    serving.forget_serving()
    serving.reset_encoders()


def pids_answering(host: Gunicorn, want: Callable[[int, Any], bool], timeout: float) -> set[int]:
    """Ask the health view until both worker processes gave an answer ``want`` accepts."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < 2:
        status, body = host.get("/sbert/health/")
        if want(status, body):
            seen.add(body["pid"])
        if time.monotonic() > deadline:
            raise TimeoutError(f"last answer {status} {body}; accepted from {seen}")
    return seen


def promote(encoder: Any, label: str) -> EncoderVersion:
    key, version = serving.save_encoder(encoder, "default", label)
    target = EncoderVersion.objects.create(encoder_name="default", version=version, directory=key)
    promotion.start_promotion(target, gate=False, run_now=True)
    target.refresh_from_db()
    assert target.status == VersionStatus.ACTIVE
    return target


def perturbed(encoder: Any, seed: int) -> Any:
    """A copy of ``encoder`` with slightly different weights: another version."""
    import copy

    import torch

    other = copy.deepcopy(encoder)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in other.transformer.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 1e-3)
    return other


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_gunicorn_processes_are_warm_at_start_and_follow_a_promotion(web_host, tiny_encoder):
    Article.objects.bulk_create(Article(title=t, body="story") for t in TITLES)
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    base = serving.serving_version("default")
    host = web_host("web-1")
    host.wait_for_log("web process warmed", count=2, timeout=120)

    # The first request each process gets already finds it warm: nothing warms on request.
    def ready(version: str) -> Callable[[int, Any], bool]:
        return lambda status, body: status == 200 and body["versions"] == {"default": version}

    assert len(pids_answering(host, ready(base), timeout=10)) == 2
    assert host.output().count("with 1 torch threads") == 2  # 2 CPUs / 2 processes, or THREADS

    target = promote(perturbed(tiny_encoder, seed=1), "tiny")
    switched = time.monotonic()
    # While it staged, both processes fetched, verified and ran the new version.
    host.wait_for_log(f"pre-loaded version {target.version} being promoted", count=2, timeout=5)
    pids_answering(host, ready(target.version), timeout=5)
    caught_up = time.monotonic() - switched
    assert caught_up < 5
    status, body = host.get("/api/sbert/search/", model="testapp.article", q="bank", k=3)
    assert status == 200, body
    assert body["results"]
    assert {row["object"]["embedding_version"] for row in body["results"]} == {target.version}


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_host_that_cannot_verify_the_serving_version_is_unready_and_does_not_start(
    web_host, tiny_encoder, settings
):
    Article.objects.bulk_create(Article(title=t, body="story") for t in TITLES)
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    host = web_host("web-1")
    host.wait_for_log("web process warmed", count=2, timeout=120)

    # The training side saves a version and verifies its own copy; then the stored weights
    # get corrupted before the web host fetched them, and the version is promoted.
    encoder = perturbed(tiny_encoder, seed=2)
    key, version = serving.save_encoder(encoder, "default", "tiny")
    serving.local_directory("default", version, key)
    weights = Path(settings.STORAGES["sbert_models"]["OPTIONS"]["location"]) / key
    data = bytearray((weights / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (weights / "model.safetensors").write_bytes(bytes(data))
    target = EncoderVersion.objects.create(encoder_name="default", version=version, directory=key)
    promotion.start_promotion(target, gate=False, run_now=True)

    def refused(status: int, body: Any) -> bool:
        reason = body.get("checks", {}).get("encoder:default", "")
        return status == 503 and version in reason and "sha256" in reason

    pids_answering(host, refused, timeout=10)
    _, body = host.get("/sbert/health/")
    assert "FileSystemStorage" in body["checks"]["encoder:default"]
    status, body = host.get("/api/sbert/search/", model="testapp.article", q="bank")
    assert status == 503 and version not in body["detail"]  # the reason is in the host's log
    host.wait_for_log(f"(request {body['request_id']}): VersionUnavailable", count=1, timeout=5)
    assert version in host.output()

    second = web_host("web-2")  # a host starting now refuses to start at all
    second.process.wait(timeout=120)
    assert second.process.returncode != 0
    assert "django_sbert.E012" in second.output() and version in second.output()
    assert "web process warmed" not in second.output()


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_workers_forked_after_the_start_up_checks_get_pooled_connections(web_host):
    """The master's checks used Django's psycopg pool; a worker forked after them must not
    inherit it (its threads do not survive fork()): requests get connections at once."""
    Article.objects.bulk_create(Article(title=t, body="story") for t in TITLES)
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    host = web_host("pooled", SBERT_TEST_DB_POOL="1")
    host.wait_for_log("web process warmed", count=2, timeout=120)

    version = serving.serving_version("default")
    pids = pids_answering(
        host, lambda status, body: status == 200 and body["versions"] == {"default": version}, 10
    )
    assert len(pids) == 2
    # Both processes at once: had they inherited the master's pooled connection, they would
    # share one socket and answer with each other's rows, errors or nothing.
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(
            pool.map(
                lambda n: host.get("/api/sbert/search/", model="testapp.article", q=TITLES[n % 3]),
                range(40),
            )
        )
    assert [status for status, _ in answers] == [200] * 40
    for n, (_, body) in enumerate(answers):
        assert body["results"][0]["object"]["title"] == TITLES[n % 3]


# --- a worker host's probe -------------------------------------------------------------------


@pytest.mark.django_db
def test_sbert_health_probes_a_host_without_a_web_process(
    settings, tmp_path, tiny_encoder, monkeypatch
):
    from django.core.management import CommandError, call_command

    store = tmp_path / "training-writes-here"
    settings.STORAGES = {
        **global_settings.STORAGES,
        "sbert_models": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(store)},
        },
    }
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_STORAGE": "sbert_models",
        "MODEL_CACHE": str(tmp_path / "training-side-cache"),
        "VERSION_CACHE_SECONDS": 0.1,
    }
    serving.forget_serving()
    serving.reset_encoders()
    out = StringIO()
    call_command("sbert_health", "--broker", stdout=out)
    assert json.loads(out.getvalue())["checks"] == {
        "database:default": "ok",
        "encoder:default": "ok",
        "broker": "ok",
    }

    target = promote(perturbed(tiny_encoder, seed=3), "tiny")  # verified on the training side
    weights = store / target.directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    settings.SBERT = {**settings.SBERT, "MODEL_CACHE": str(tmp_path / "worker-host-cache")}
    serving.forget_serving()
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:1/0")  # read before settings
    with pytest.raises(CommandError) as info:
        call_command("sbert_health", "--broker")
    checks = json.loads(str(info.value))["checks"]
    assert checks["database:default"] == "ok"
    assert target.version in checks["encoder:default"] and "sha256" in checks["encoder:default"]
    assert checks["broker"].startswith("the broker did not answer")
    serving.forget_serving()
    serving.reset_encoders()
