"""Settings of worker subprocesses started by test_training_worker.py.

``tests.settings`` plus the SBERT keys the test process overrides, handed over in the
environment (a subprocess does not see ``override_settings``).
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import SBERT as _BASE

SBERT = {
    **_BASE,
    "MODEL_DIR": os.environ["SBERT_TEST_MODEL_STORE"],
    "TRAINING": {"QUEUE": os.environ["SBERT_TEST_TRAINING_QUEUE"]},
}
