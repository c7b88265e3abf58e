"""A FileSystemStorage that sleeps before opening a model's weights: a slow model storage.

A real storage backend (it reads and writes the directory it is given). Opening
``model.safetensors`` takes ``delay`` seconds more, as a large download from a distant bucket
would; ``opening`` is set while such an open sleeps, so a test knows a load is under way.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.core.files.storage import FileSystemStorage

opening = threading.Event()  # set while an open of the weights sleeps
WEIGHTS = "model.safetensors"


class SlowFileSystemStorage(FileSystemStorage):
    def __init__(self, *, delay: float = 3.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def _open(self, name: str, mode: str = "rb") -> Any:
        if name.endswith(WEIGHTS):
            opening.set()
            try:
                time.sleep(self.delay)
            finally:
                opening.clear()
        return super()._open(name, mode)
