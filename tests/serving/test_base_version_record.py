"""Every host serves the base version the database recorded when the model first served.

Each host used to compute the settings' model's version from its own files: two copies that
differ in a file the encoder never reads (a NOTES.txt) got two versions, missed each other's
rows and re-encoded them for ever. Now the first host records it; a host whose copy differs in
a file the encoder reads refuses (``VersionUnavailable``, check E012) with a clear message.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from django_sbert import serving
from django_sbert.checks import check_local_files
from django_sbert.encoder.fingerprint import encoder_files
from django_sbert.exceptions import VersionUnavailable
from django_sbert.models import BaseVersion

pytestmark = pytest.mark.django_db


def use_model(settings, directory: Path) -> None:
    encoders = settings.SBERT["ENCODERS"]
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {**encoders, "default": {**encoders["default"], "MODEL": str(directory)}},
    }
    serving.reset_encoders()
    serving.forget_serving()


@pytest.fixture
def copies(tmp_path, settings):
    """a/tiny and b/tiny hold the tiny model; b/tiny also a NOTES.txt the encoder never reads."""
    source = Path(django_settings.TINY_MODEL_DIR)
    a, b = tmp_path / "a" / "tiny", tmp_path / "b" / "tiny"
    shutil.copytree(source, a)
    shutil.copytree(source, b)
    (b / "NOTES.txt").write_text("copied from the staging host on Monday\n")
    yield a, b
    use_model(settings, source)


def test_hosts_whose_copies_differ_only_in_unread_files_serve_one_version(copies, settings):
    a, b = copies
    assert "NOTES.txt" not in encoder_files(b)
    use_model(settings, a)
    first = serving.serving_version("default")
    assert first.startswith("tiny:")
    assert BaseVersion.objects.filter(encoder_name="default", label="tiny").count() == 1

    use_model(settings, b)  # another host, the same model plus a note
    assert serving.serving_version("default") == first
    assert check_local_files(databases=["default"]) == []


def test_a_host_with_changed_weights_refuses_with_a_clear_message(copies, settings, tmp_path):
    a, _ = copies
    use_model(settings, a)
    first = serving.serving_version("default")

    changed = tmp_path / "c" / "tiny"
    shutil.copytree(a, changed)
    weights = changed / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    use_model(settings, changed)

    with pytest.raises(VersionUnavailable) as info:
        serving.serving_version("default")
    message = str(info.value)
    assert first in message and str(changed) in message
    assert "differs in a file the encoder reads" in message
    errors = check_local_files(databases=["default"])
    assert [e.id for e in errors] == ["django_sbert.E012"]
    assert "differs in a file the encoder reads" in errors[0].msg

    # Changed on purpose on every host: forget the record, and the new files serve.
    call_command("sbert_manifest", "--forget-base", "default", stdout=io.StringIO())
    assert serving.serving_version("default") not in ("", first)
