"""File modes of the caches this package writes: as the process's umask says, like any file.

``tempfile.mkdtemp`` and ``mkstemp`` create 0700 / 0600 whatever the umask; a verified model
copy or a compiled package renamed from one would be readable by its creator alone, and a web
process and a worker running as different users could not share one cache. ``shared_mode``
gives what ``open()`` / ``mkdir()`` would have made instead.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_lock = threading.Lock()


def current_umask() -> int:
    """This process's umask (from /proc where it is readable, else set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _lock:  # os.umask() only sets: read it by setting it back at once
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def shared_mode(path: str | os.PathLike[str]) -> None:
    """Give ``path`` the mode ``mkdir()`` (a directory) or ``open()`` (a file) would under the
    umask: 0755 / 0644 with the usual 022, 0775 / 0664 with 002 for a group-shared cache."""
    base = 0o777 if Path(path).is_dir() else 0o666
    os.chmod(path, base & ~current_umask())
