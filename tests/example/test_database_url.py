"""``DATABASE_URL`` as the test settings and the example site read it (dj-database-url).

pgserver's URLs carry a Unix socket folder as ``?host=``: both readers turn it into ``HOST`` and
a real connection works through it; the example's embedded server, released through pgserver's
public ``cleanup()``, stops when its last user lets go.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from types import ModuleType

import psycopg
import pytest

from tests.example.conftest import ROOT
from tests.settings import database_from_url as parse_for_tests


def example_database_module() -> ModuleType:
    """``example_project/demo_site/database.py``, loaded without the example's settings."""
    path = ROOT / "example_project" / "demo_site" / "database.py"
    spec = importlib.util.spec_from_file_location("demo_site_database", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PARSERS = [parse_for_tests, example_database_module().database_from_url]


@pytest.mark.parametrize("parse", PARSERS, ids=["tests", "example"])
def test_urls_become_database_settings(parse):
    socket_url = "postgresql://postgres:@/postgres?host=/tmp/pg/pgdata"
    config = parse(socket_url)
    assert (config["HOST"], config["NAME"], config["USER"]) == (
        "/tmp/pg/pgdata",
        "postgres",
        "postgres",
    )
    assert config["ENGINE"] == "django.db.backends.postgresql" and config["OPTIONS"] == {}

    config = parse("postgres://site:p%40ss@db.example:5433/news?sslmode=require")
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.example", 5433, "news")
    assert (config["USER"], config["PASSWORD"]) == ("site", "p@ss")
    assert config["OPTIONS"] == {"sslmode": "require"}

    with pytest.raises(ValueError, match="pgvector needs PostgreSQL"):
        parse("sqlite:///db.sqlite3")


def test_the_example_server_starts_connects_and_stops(tmp_path: Path):
    database = example_database_module()
    data_dir = tmp_path / "pgdata"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
        config = database.database_from_url(database.start_embedded_postgres(data_dir))
    with psycopg.connect(host=config["HOST"], dbname=config["NAME"], user=config["USER"]) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert (data_dir / "postmaster.pid").exists()
    assert database.stop_embedded_postgres(data_dir) is True
    assert not (data_dir / "postmaster.pid").exists()
    assert database.stop_embedded_postgres(data_dir) is False  # released already
