"""Real ``FileSystemStorage`` subclasses that fail the way remote storages do.

``RaisingStorage`` raises an exception that is not an ``OSError`` (as botocore's
``ClientError`` and ``EndpointConnectionError`` are not) from ``exists()`` or ``open()``;
``SleepingStorage`` hangs in ``_open`` like an unreachable endpoint; ``MeteredStorage`` counts
the bytes read through the files it opens and the files it opens. Each reads and writes the
directory it is given, so the training side can save a version through a plain one first.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import global_settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage

from django_sbert import serving
from django_sbert.serving.model_cache import forget_fetch_failures


class StorageClientError(Exception):
    """Stands for botocore.exceptions.ClientError: an ``Exception``, not an ``OSError``."""


class RaisingStorage(FileSystemStorage):
    def __init__(self, *, fail: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail = fail

    def exists(self, name: str) -> bool:
        if self.fail == "exists":
            raise StorageClientError("An error occurred (403) when calling the HeadObject")
        return super().exists(name)

    def _open(self, name: str, mode: str = "rb") -> Any:
        if self.fail == "open":
            raise StorageClientError("An error occurred (AccessDenied) when calling GetObject")
        return super()._open(name, mode)


class SleepingStorage(FileSystemStorage):
    def __init__(self, *, delay: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def _open(self, name: str, mode: str = "rb") -> Any:
        time.sleep(self.delay)
        return super()._open(name, mode)


class MeteredStorage(FileSystemStorage):
    """Counts, for the whole test process, each file opened and the bytes read from each."""

    lock = threading.Lock()
    opened: Counter[str] = Counter()
    read: Counter[str] = Counter()

    def _open(self, name: str, mode: str = "rb") -> Any:
        with self.lock:
            self.opened[name] += 1
        handle = super()._open(name, mode)
        return _MeteredFile(handle.file, handle.name, key=name)

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.opened.clear()
            cls.read.clear()


class _MeteredFile(File):
    def __init__(self, file: Any, name: str, *, key: str) -> None:
        super().__init__(file, name)
        self.key = key

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        data = self.file.read(size)
        with MeteredStorage.lock:
            MeteredStorage.read[self.key] += len(data)
        return data


def use_storage(settings: Any, location: Path, backend: type, cache: Path, **options: Any) -> None:
    """Make ``backend`` over ``location`` the model storage (STORAGES["sbert_models"]) and
    ``cache`` this host's cache; forget loaded encoders and remembered fetch failures."""
    settings.STORAGES = {
        **global_settings.STORAGES,
        "sbert_models": {
            "BACKEND": f"{backend.__module__}.{backend.__qualname__}",
            "OPTIONS": {"location": str(location), **options},
        },
    }
    settings.SBERT = {**settings.SBERT, "MODEL_STORAGE": "sbert_models", "MODEL_CACHE": str(cache)}
    serving.reset_encoders()
    serving.forget_serving()
    forget_fetch_failures()
