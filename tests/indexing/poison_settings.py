"""Settings of the worker subprocess started by test_memory.py's poison-pill test.

``tests.settings`` with the test's queue (a message sent again by the worker goes where the
test's worker listens) and ``MAX_DELIVERIES`` = 2, handed over in the environment: a
subprocess does not see ``override_settings``.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import SBERT as _BASE

SBERT = {**_BASE, "QUEUE": os.environ["SBERT_TEST_QUEUE"], "MAX_DELIVERIES": 2}
