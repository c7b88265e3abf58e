"""Settings of the query server subprocess (``tests/query_server_process.py``): the test
settings (the server's batching, queue and cache are its command's flags)."""

from tests.settings import *  # noqa: F403
