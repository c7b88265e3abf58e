"""Fixtures of the feedback tests: the API tests' articles and registrations, the log on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.conftest import _isolated_api_state, articles, registered  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def feedback(settings) -> Callable[..., None]:
    """Set SBERT["FEEDBACK"] (the log on, no per-client rate unless given); ``rates``:
    SBERT["RATES"] scopes."""

    def _set(rates: dict[str, Any] | None = None, **options: Any) -> None:
        group = {"LOG": True, **options}
        rates = {"logging": None, **(rates or {})}
        settings.SBERT = {**settings.SBERT, "FEEDBACK": group, "RATES": rates}

    return _set


@pytest.fixture
def log_on(feedback) -> None:
    feedback()


def search_url(q: str = "interest rates", **params: Any) -> str:
    from urllib.parse import urlencode

    return "/api/sbert/search/?" + urlencode({"model": "testapp.article", "q": q, **params})
