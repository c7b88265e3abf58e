"""Stored errors of runs and promotions: the traceback is kept, and ``error_message`` strips it."""

from __future__ import annotations

import pytest

from django_sbert.finetuning.errors import describe_exception, error_message


def _failure() -> str:
    try:
        {}["missing"]
    except KeyError as exc:
        return describe_exception(exc)
    raise AssertionError("unreachable")


def test_the_stored_error_keeps_the_traceback_and_the_message_drops_it():
    stored = _failure()
    assert stored.startswith("KeyError: 'missing'\n\nTraceback (most recent call last):")
    assert 'File "' in stored and __file__ in stored
    assert error_message(stored) == "KeyError: 'missing'"


@pytest.mark.parametrize(
    "stored,message",
    [
        ("Cancelled at step 3 of 40.", "Cancelled at step 3 of 40."),
        ("", ""),
        # what runs store when the traceback was cut to its last 3000 characters
        ('ValueError: bad\n\n  File "/srv/app/x.py", line 3, in f\n    g()\nValueError: bad',
         "ValueError: bad"),
        # a bare traceback (promotion errors were stored so before): its last line
        ('Traceback (most recent call last):\n  File "/srv/app/x.py", line 3, in f\n'
         "    g()\nOSError: disk full", "OSError: disk full"),
        ('ges.py", line 9, in h\n    x()\n  File "/srv/app/y.py", line 2, in x\n'
         "RuntimeError: boom", "RuntimeError: boom"),
    ],
)  # fmt: skip
def test_error_message(stored, message):
    assert error_message(stored) == message
