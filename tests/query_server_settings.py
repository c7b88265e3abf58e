"""Settings of the query server subprocess (``tests/query_server_process.py``): the test
settings with ``SBERT_TEST_QUERY_SERVER`` (JSON) merged into ``SBERT["QUERY_SERVER"]``."""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import SBERT as _BASE

SBERT = {**_BASE, "QUERY_SERVER": json.loads(os.environ.get("SBERT_TEST_QUERY_SERVER", "{}"))}
