"""The demo's fine-tuning from the admin alone, in real Chromium: select the demo's training
pairs, start a run with the default recipe, watch it finish, read the gate's numbers, compare
before and after, promote, roll back.

``demo.py`` runs as ``make demo`` does (embedded PostgreSQL, the two Celery workers on the
filesystem broker, ``runserver``) with 60 articles and, to keep the run short, the tiny random
model (``SBERT_MODEL``), run eagerly (``SBERT_COMPILE=0``): the flow and the pages are
real, the vectors' quality is not. The steps are ``example_project/screenshots.py``'s
``Walkthrough``, which ``make screenshots`` drives too; the pages it reaches are kept in
``artifacts/screenshots/``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.example.conftest import ARTIFACTS, DEMO_ARTICLES, ROOT, DemoProcess, chromium_paths
from tests.tiny_model import build_tiny_model

pytestmark = [pytest.mark.example, pytest.mark.slow]

sys.path.insert(0, str(ROOT / "example_project"))
from screenshots import Walkthrough, chromium, shoot  # noqa: E402

SHOTS = ARTIFACTS / "screenshots"


@pytest.fixture(scope="module")
def demo(start_demo, tmp_path_factory) -> DemoProcess:
    chromium_paths()  # every test here drives the browser: say it is missing before the demo starts
    model = build_tiny_model(tmp_path_factory.mktemp("tiny-demo-model"))
    # Eager: compiling a random model would be most of the run's time, and proves nothing here.
    run = start_demo(env={"SBERT_MODEL": str(model), "SBERT_COMPILE": "0"})
    run.wait_for(r"Serving at http://", timeout=240)
    run.wait_for(rf"All {DEMO_ARTICLES} articles (are )?embedded", timeout=300)
    return run


@pytest.fixture(scope="module")
def walk(demo: DemoProcess) -> Iterator[Walkthrough]:
    browser = chromium()
    try:
        walkthrough = Walkthrough(browser, demo.url, timeout=300)
        walkthrough.login(demo.wait_for(r"Admin login: admin / (\S+)", timeout=5)[1])
        yield walkthrough
    finally:
        browser.quit()


def test_the_first_run_makes_headline_to_lead_pairs(demo: DemoProcess, walk: Walkthrough):
    made = demo.wait_for(
        r"Made (\d+) training pairs \(headline -> lead paragraph\), (\d+) of them held out",
        timeout=5,
    )
    total, held_out = int(made[1]), int(made[2])
    assert total == DEMO_ARTICLES and 0 < held_out < total // 2
    walk.get("/admin/django_sbert/trainingpair/?split__exact=eval")
    assert re.search(rf"\b{held_out} training pairs?\b", walk.page_text())
    # The pairs action is on the articles' admin too, for more pairs.
    walk.get("/admin/articles/article/")
    assert "Make training pairs from selected" in walk.css("select[name=action]").text
    # Two workers: indexing apart from fine-tuning and promotions.
    workers = [p.cmdline() for p in demo.descendants() if "celery" in " ".join(p.cmdline())]
    queues = sorted(c[c.index("-Q") + 1] for c in workers if "-Q" in c)
    assert queues == ["sbert", "sbert-train"], workers


def test_fine_tune_compare_promote_and_roll_back_in_the_admin(demo, walk: Walkthrough):
    run = walk.fine_tune()  # every pair selected, the default recipe, waits until it succeeds
    page = walk.page_text()
    labels = page.lower()  # the admin shows labels capitalised, and CSS may change case
    assert "loss curve and eval metric" in labels and "metrics on the eval split" in labels
    assert walk.browser.find_elements("css selector", ".field-loss_curve svg")
    assert re.search(r"ndcg@10", page, re.I), page
    assert "early_stopping" in walk.css(".field-hyperparameters .readonly").text
    shoot(walk.browser, SHOTS / "training-run.png")
    pk, version = walk.candidate_of(run)

    # Before and after, on the eval queries and on a typed one, before promoting.
    walk.compare(pk)
    queries = walk.texts("h2.sbert-query")
    assert 1 <= len(queries) <= 5, queries
    assert len(walk.texts("p.sbert-ndcg")) == len(queries)
    assert len(walk.texts("td.sbert-side")) == 2 * len(queries)
    assert not walk.texts(".sbert-compare-error")
    shoot(walk.browser, SHOTS / "before-after.png")
    walk.compare(pk, "oil prices")
    assert walk.texts("h2.sbert-query") == ["oil prices"] and not walk.texts("p.sbert-ndcg")

    # Promote: the gate's numbers in the message, then the version serves and search works.
    message = walk.promote(version, pk)
    assert re.search(r"ndcg@10: candidate [\d.]+ vs active [\d.]+", message), message
    walk.search("oil prices", "hybrid")
    assert len(walk.texts(".result .title")) == 10
    walk.compare(pk)  # the active version against the one it replaced
    assert "(Active)" in walk.css("#sbert-before-after").text
    assert not walk.texts(".sbert-compare-error")

    # Roll back: the version it replaced serves again.
    # A rollback asked while the promotion is still finishing is refused with a message and
    # changes nothing; a staff user asks again, as this does.
    def rollback_started() -> bool:
        walk.run_action("/admin/django_sbert/encoderversion/", "rollback", rows=version)
        # The message is on the page the action redirects to: read it once that page is in
        # (read too early, a rollback that started looks refused, and the next try is).
        said = walk.wait(lambda: " ".join(walk.texts(".messagelist li")), "the message")
        return "Rolling back" in said

    walk.wait(rollback_started, "the rollback to start")
    walk.wait(lambda: walk.version_status(pk) == "retired", f"{version} to be retired")
    walk.get("/admin/django_sbert/encoderversion/?status__exact=active")
    assert len(walk.texts("#result_list tbody tr")) == 1
    assert version not in walk.page_text()


def test_screenshots_script_writes_the_readme_pictures(walk: Walkthrough, tmp_path: Path):
    from screenshots import take

    shots = take(walk, tmp_path)
    assert [p.name for p in shots] == ["search.png", "training-run.png", "before-after.png"]
    for path in shots:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
