"""The model storage as an S3 bucket: django-storages' S3 backend against moto in server mode.

moto's server runs as a subprocess on 127.0.0.1 (a real HTTP endpoint speaking S3); the
training side saves a version into the bucket, a host with its own cache fetches and verifies
it, and an object altered in the bucket is refused.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import numpy as np
import pytest
from django.conf import global_settings

from django_sbert import serving
from django_sbert.exceptions import VersionUnavailable
from django_sbert.serving.model_cache import cached_path, local_directory
from django_sbert.serving.storage import MANIFEST, read_manifest

BUCKET = "sbert-models"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    moto = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    process = subprocess.Popen(
        [moto, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.1)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **CREDENTIALS)
    client.create_bucket(Bucket=BUCKET)
    yield endpoint
    process.terminate()
    process.wait(timeout=30)
    log.close()


@pytest.fixture
def s3_site(settings, tmp_path, s3_endpoint) -> Iterator[object]:
    settings.STORAGES = {
        **global_settings.STORAGES,
        "sbert_models": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "location": f"run-{tmp_path.name}",
                "endpoint_url": s3_endpoint,
                "region_name": "us-east-1",
                "access_key": CREDENTIALS["aws_access_key_id"],
                "secret_key": CREDENTIALS["aws_secret_access_key"],
            },
        },
    }
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_STORAGE": "sbert_models",
        "MODEL_CACHE": str(tmp_path / "host-cache"),
    }
    serving.reset_encoders()
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", **CREDENTIALS)
    yield client, f"run-{tmp_path.name}"
    serving.reset_encoders()


@pytest.mark.heavy
def test_a_version_saved_to_s3_is_fetched_verified_and_loaded(s3_site, tiny_encoder, tmp_path):
    client, location = s3_site
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")

    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{location}/{key}/")["Contents"]
    names = {item["Key"].removeprefix(f"{location}/{key}/") for item in listed}
    manifest = read_manifest(key)
    assert names == {*manifest["files"], MANIFEST}
    local = local_directory("default", version, key)
    assert local == cached_path(key) and local.is_relative_to(tmp_path / "host-cache")
    texts = ["central bank raises rates", "storm closes schools"]
    loaded = serving.encoder_for(serving.Serving("default", version, key))
    np.testing.assert_allclose(loaded.encode(texts), tiny_encoder.encode(texts), atol=1e-6)


def test_an_object_altered_in_the_bucket_is_refused(s3_site, tiny_encoder):
    client, location = s3_site
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    object_key = f"{location}/{key}/config.json"
    body = client.get_object(Bucket=BUCKET, Key=object_key)["Body"].read()
    client.put_object(Bucket=BUCKET, Key=object_key, Body=body.replace(b"{", b"{ ", 1))

    with pytest.raises(VersionUnavailable) as info:
        local_directory("default", version, key)
    message = str(info.value)
    assert version in message and "S3Storage" in message and f"bucket_name={BUCKET}" in message
    # One byte more than the manifest says: refused without reading further.
    assert f"{key}/config.json is larger than the {len(body)} bytes" in message
    assert not cached_path(key).exists()
