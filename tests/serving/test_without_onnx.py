"""A site installed without the ``onnx`` extra: ``QUERY_RUNTIME="auto"`` serves its queries
with torch, saying why only in the path's reason; ``"onnxruntime"`` asked for explicitly is
check E016, which names the extra.

Each test runs a fresh process in which ``onnxruntime``, ``onnx`` and ``onnxscript`` cannot be
imported (``sys.modules[name] = None``: ``import`` raises ImportError and ``find_spec`` finds
nothing, as on a host without them), with the test settings, the tiny model and this test's
database. The encoder is the real one: the vectors are compared with torch's in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from django.db import connection

from django_sbert.conf import encoder_config
from django_sbert.encoder import SentenceEncoder

pytestmark = [pytest.mark.heavy, pytest.mark.django_db]  # a process that imports torch

ROOT = Path(__file__).resolve().parents[2]
QUERY = "central banks raise interest rates"

PREAMBLE = """
import json, sys, warnings
sys.modules.update(dict.fromkeys(("onnxruntime", "onnx", "onnxscript"), None))
import tests.settings as site
site.DATABASES["default"]["NAME"] = sys.argv[1]  # this test's database: migrated, read only
encoder = {**site.SBERT["ENCODERS"]["default"], "QUERY_RUNTIME": sys.argv[2]}
if sys.argv[2] == "auto":
    del encoder["QUERY_RUNTIME"]  # the default a project gets
site.SBERT = {**site.SBERT, "ENCODERS": {"default": encoder}}
import django
django.setup()
"""

CHECK = """
from django.core import checks
found = [e for e in checks.run_checks() if e.id.startswith("django_sbert.")]
errors = [{"id": e.id, "msg": e.msg, "hint": e.hint} for e in found]
"""

SERVE = """
from django_sbert import serving
path = serving.encoder_path("default", "query")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    vector, version = serving.query_vector(sys.argv[3])
    model = serving.get_encoder("default")
print(json.dumps({
    "query_runtime": path.query_runtime,
    "reason": path.reason,
    "model_runtime": model.query_runtime,
    "onnx": repr(model._onnx),
    "failure": model.query_runtime_failure,
    "warnings": [str(w.message) for w in caught],
    "vector": [float(x) for x in vector],
    "onnxruntime_loaded": sys.modules.get("onnxruntime") is not None,
    "checks": errors,
}))
"""


def run(code: str, *args: str) -> object:
    result = subprocess.run(
        [sys.executable, "-c", PREAMBLE + CHECK + code, connection.settings_dict["NAME"], *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_auto_serves_queries_with_torch_without_a_word():
    found = run(SERVE, "auto", QUERY)
    assert found["query_runtime"] == found["model_runtime"] == "torch"
    assert 'onnxruntime is not installed (pip install "django-sbert[onnx]")' in found["reason"]
    assert found["onnx"] == "None" and found["failure"] is None  # never tried, nothing failed
    assert found["warnings"] == [] and not found["onnxruntime_loaded"]
    assert found["checks"] == []  # no E016: "auto" asked for nothing that is missing
    torch_path = SentenceEncoder.load(encoder_config("default")["MODEL"])
    np.testing.assert_allclose(found["vector"], torch_path.encode(QUERY), atol=1e-6)


@pytest.mark.parametrize("runtime", ["onnxruntime", "onnxruntime-int8"])
def test_an_explicit_onnxruntime_is_an_error_that_names_the_extra(runtime):
    (error,) = run('print(json.dumps({"checks": errors}))', runtime)["checks"]
    assert error["id"] == "django_sbert.E016"
    assert f"['QUERY_RUNTIME'] is '{runtime}'" in error["msg"]
    assert "onnxruntime is not installed" in error["msg"]
    assert 'pip install "django-sbert[onnx]"' in error["hint"]
