"""A FileSystemStorage that appends the name of every file it opens to a log file.

A real storage backend (it reads and writes the directory it is given), so that a test can
count how often the hosts of a site fetched each file.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.files.storage import FileSystemStorage


class CountingFileSystemStorage(FileSystemStorage):
    def __init__(self, *, open_log: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.open_log = open_log

    def _open(self, name: str, mode: str = "rb") -> Any:
        # One write(2) on an O_APPEND file: lines of concurrent processes never interleave.
        fd = os.open(self.open_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {name}\n".encode())
        finally:
            os.close(fd)
        return super()._open(name, mode)
