"""Settings of the servers ``benchmarks.first_search`` starts: ``benchmarks._web_settings``
(the test app's Article, all-MiniLM-L6-v2, the REST API) with this host's compile cache in
``BENCH_COMPILE_CACHE`` (an empty folder: a new host)."""

import os

from benchmarks._web_settings import *  # noqa: F403
from benchmarks._web_settings import SBERT as _BASE

SBERT = {**_BASE, "COMPILE_CACHE": os.environ["BENCH_COMPILE_CACHE"]}
