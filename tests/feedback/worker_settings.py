"""Settings of the training worker started by test_loop_worker.py: ``tests.worker_settings``
with the loop's settings of the test, handed over in the environment."""

import os

from tests.worker_settings import *  # noqa: F403
from tests.worker_settings import SBERT as _BASE

SBERT = {
    **_BASE,
    "FEEDBACK": {
        "AUTO_PROMOTE": os.environ.get("SBERT_TEST_AUTO_PROMOTE") == "1",
        "MIN_CLIENTS": 1,
        "MIN_RELEVANCE": 0,
        "LOOP_MIN_PAIRS": 2,
    },
}
