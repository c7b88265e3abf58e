"""Settings of the worker subprocess started by test_bad_rows.py.

``tests.settings`` with the "default" encoder's model replaced by the poisoned copy the test
process uses too (handed over in the environment: a subprocess does not see
``override_settings``), so both compute the same encoder version.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import SBERT as _BASE

SBERT = {
    **_BASE,
    "ENCODERS": {
        "default": {**_BASE["ENCODERS"]["default"], "MODEL": os.environ["SBERT_TEST_POISONED"]}
    },
}
