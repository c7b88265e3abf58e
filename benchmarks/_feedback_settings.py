"""Settings of ``benchmarks.feedback_overhead``: the gunicorn site of ``benchmarks.connections``
(the test app's Article, all-MiniLM-L6-v2, the REST API and ``sbert/click/`` without rate
limits) with the search log on and no per-client limits on logging or events; one proxy
trusted in front of it (``NUM_PROXIES`` 1), so a simulated visitor's address comes in
``X-Forwarded-For``."""

from benchmarks._web_settings import *  # noqa: F403
from benchmarks._web_settings import SBERT

SBERT = {
    **SBERT,
    "FEEDBACK": {"LOG": True},
    "RATES": {**SBERT.get("RATES", {}), "logging": None, "clicks": None},
    "API": {**SBERT.get("API", {}), "NUM_PROXIES": 1},
}
