"""A request body for the Django test client that counts what the server reads of it: the
tests of the body bounds (``api/parsers.py``, ``views/click.py``) check that a body over a
bound is refused before any of it is read."""

from __future__ import annotations

from django.test.client import FakePayload


class CountingPayload(FakePayload):
    """``client.generic(..., **{"wsgi.input": CountingPayload(body)})``; ``read_bytes`` after."""

    read_bytes = 0

    def read(self, size=None, /):
        data = super().read(size)
        self.read_bytes += len(data)
        return data
