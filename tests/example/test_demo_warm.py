"""``make demo`` prints its URL only once the first search needs no model load or compile.

``demo.py`` runs as a newcomer runs it, in a new folder (so its compile cache is empty, as on a
new host), with the real all-MiniLM-L6-v2. The web process logs when it has its compiled query
graph and prints "query encoder ready" before it opens its port; the demo prints "Serving at"
only once ``sbert/health/`` answers 200. The first search's page shows how long encoding the
query took in the server: milliseconds, where building the graph on that request would take
tens of seconds.
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request

import pytest

from django_sbert.encoder.paths import compiler_available
from tests.example.conftest import DemoProcess

pytestmark = [pytest.mark.example, pytest.mark.slow]

# The query's graph: torch's compiled one, or ONNX Runtime's where that path encodes queries
# (a CPU without native bf16: encoder.md, "Which path each process takes").
GRAPH = re.compile(r"(Built|Loaded) the compiled query graph|(Exported|Loaded) the query graph")
# Far above a warm encode (milliseconds) even on a loaded machine; far below building the
# graph (30-40 s on 2 idle cores) or loading the model (seconds).
FIRST_ENCODE_BOUND_MS = 3000.0


def web_log(run: DemoProcess) -> str:
    return (run.var_dir / "logs" / "web.log").read_text(errors="replace")


@pytest.mark.timeout(1500)  # a new host builds the graph first: minutes on a busy machine
def test_the_first_search_after_the_url_is_printed_encodes_on_a_warm_process(start_demo):
    run = start_demo()
    try:
        run.wait_for(r"Serving at http://", timeout=900)
        before = web_log(run)
        assert "query encoder ready" in before, before[-3000:]
        if compiler_available():  # the compiled path: its graph was there before the URL
            assert GRAPH.search(before), before[-3000:]
        query = urllib.parse.urlencode({"q": "reporters arrested by Pyongyang"})
        with urllib.request.urlopen(f"{run.url}/?{query}", timeout=300) as response:
            page = response.read().decode()
        encoded = re.search(r"encoding the query\s+([\d.,]+)\s*ms", page)
        assert encoded, page[-3000:]
        assert float(encoded.group(1).replace(",", "")) < FIRST_ENCODE_BOUND_MS
        after = web_log(run)[len(before) :]
        assert not GRAPH.search(after), after  # nothing compiled or loaded on the request
        assert run.interrupt() == 0
    finally:
        if run.process.poll() is None:
            run.kill()
