"""uvicorn serving a site wrapped in ``django_sbert.contrib.asgi.warm_on_startup`` says it is
ready ("Application startup complete.") only once its query graph is built and the encoder
warm, so the first search compiles nothing.

A real uvicorn subprocess on the test database, the tiny encoder compiled, an empty compile
cache (a new host). The order of the server's log lines is what is asserted, not wall-clock
times, which a loaded machine stretches.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest

from django_sbert.encoder.paths import compiler_available
from tests.query.test_asgi import free_port
from tests.worker_process import ROOT, test_database_url

pytest.importorskip("uvicorn")

READY = "Application startup complete."
BUILT = "Built the compiled query graph"
WARMED = "web process warmed ['default']"


@pytest.mark.heavy
@pytest.mark.skipif(not compiler_available(), reason="no C++ compiler: nothing to compile")
@pytest.mark.django_db(transaction=True)
def test_uvicorn_is_ready_only_after_the_query_graph_is_built(tmp_path):
    port = free_port()
    log_path = tmp_path / "uvicorn.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.asgi_app.warm_settings",
        "DATABASE_URL": test_database_url(),
        "SBERT_TEST_COMPILE_CACHE": str(tmp_path / "compiled"),
    }
    command = [
        sys.executable, "-m", "uvicorn", "tests.asgi_app.warm_asgi:application",
        "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
    ]  # fmt: skip
    with log_path.open("ab") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300  # the compile: seconds, minutes on a loaded machine
        while READY not in log_path.read_text():
            assert server.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
        before = log_path.read_text()
        assert before.index(BUILT) < before.index(WARMED) < before.index(READY), before
        query = urlencode({"q": "interest rates and the economy", "k": 3})
        with urlopen(f"http://127.0.0.1:{port}/search/?{query}", timeout=60) as response:
            assert response.status == 200
        after = log_path.read_text()[len(before) :]
        assert "compiled query graph" not in after, after  # nothing built or loaded on it
    finally:
        server.terminate()
        server.wait(timeout=30)
