"""Errors of training runs and promotions: the traceback for superusers, the message for staff.

``TrainingRun.error`` and ``EncoderVersion.promotion_error`` are stored as
``"<Type>: <message>\\n\\n<traceback>"`` (``describe_exception``). The logs and superusers get all
of it; other staff see ``error_message(text)``, the part without the traceback, since a
traceback shows file paths, settings and code of the server.
"""

from __future__ import annotations

import re
import traceback
from typing import Any

_TRACEBACK = re.compile(r'^(Traceback \(most recent call last\)|\s+File ".*", line \d+)', re.M)


def describe_exception(exc: BaseException, limit: int = 3000) -> str:
    """``"<Type>: <message>\\n\\n<traceback>"`` of ``exc`` (at most the last ``limit``
    characters of the traceback)."""
    trace = "".join(traceback.format_exception(exc))
    return f"{type(exc).__name__}: {exc}\n\n{trace[-limit:]}"


def error_message(text: str) -> str:
    """``text`` without its traceback: the ``<Type>: <message>`` part, or, for a bare
    traceback, its last line (which names the exception)."""
    text = (text or "").strip()
    if not _TRACEBACK.search(text):
        return text
    head, separator, _ = text.partition("\n\n")
    if separator and not _TRACEBACK.search(head):
        return head.strip()
    return text.splitlines()[-1].strip()


def may_see_traceback(user: Any) -> bool:
    """Whether ``user`` sees stored errors whole, traceback included: active superusers."""
    return bool(user is not None and user.is_active and user.is_superuser)


def error_for(user: Any, text: str) -> str:
    """``text`` as ``user`` may see it: whole for superusers, ``error_message`` for others."""
    return text if may_see_traceback(user) else error_message(text)
