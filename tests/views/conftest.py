"""The API tests' articles (eight rows with well-spread vectors), for the plain views too."""

from tests.api.conftest import articles  # noqa: F401
