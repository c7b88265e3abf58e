"""Settings of the worker subprocess started by test_memory.py's poison-pill test.

``tests.settings`` with ``MAX_DELIVERIES`` = 2: a subprocess does not see
``override_settings``.
"""

from tests.settings import *  # noqa: F403
from tests.settings import SBERT as _BASE

SBERT = {**_BASE, "MAX_DELIVERIES": 2}
