"""``make screenshots``: regenerate ``docs/images/*.png`` from a running demo in real Chromium.

::

    make demo                      # in one terminal; note the admin password it prints
    make screenshots PASSWORD=...  # in another: URL=http://127.0.0.1:8000 by default

Takes, with headless Chromium (Debian's ``chromium`` and ``chromium-driver``, ``make
browser``):

* ``search.png``: the search page in hybrid mode for "reporters held by Pyongyang";
* ``training-run.png``: a fine-tuning run's page (progress, loss and eval curves, metrics),
  starting one from the admin on every demo training pair when none has succeeded yet;
* ``before-after.png``: that run's version's "Before and after" page.

``Walkthrough`` is the admin flow a visitor follows (log in, select the pairs, fine-tune,
promote, compare, roll back); ``tests/example/test_demo_finetune.py`` drives the same steps
and checks what each page says.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUERY = "reporters held by Pyongyang"
WINDOW = (1200, 1300)


def chromium(window: tuple[int, int] = WINDOW) -> Any:
    """Headless Chromium through its matching chromedriver (nothing is downloaded)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        raise SystemExit(
            "chromium and chromedriver are needed: `make browser` (as root) or "
            "`sudo apt-get install chromium chromium-driver`."
        )
    options = Options()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",  # as root (CI), Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={window[0]},{window[1]}",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    browser.set_page_load_timeout(120)
    return browser


class Walkthrough:
    """The demo's admin fine-tuning flow, step by step, in a browser logged in as ``admin``."""

    def __init__(self, browser: Any, url: str, timeout: float = 900.0) -> None:
        self.browser = browser
        self.url = url.rstrip("/")
        self.timeout = timeout

    def get(self, path: str) -> None:
        self.browser.get(f"{self.url}{path}")

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.browser.find_element(By.CSS_SELECTOR, selector)

    def texts(self, selector: str) -> list[str]:
        from selenium.webdriver.common.by import By

        return [e.text for e in self.browser.find_elements(By.CSS_SELECTOR, selector)]

    def wait(self, condition: Callable[[], Any], what: str, reload: bool = False) -> Any:
        """Poll ``condition`` (reloading the page first when ``reload``) until it is truthy."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if reload:
                self.browser.refresh()
            result = condition()
            if result:
                return result
            time.sleep(1.0)
        raise TimeoutError(f"Waited {self.timeout:.0f} s for {what}; page:\n{self.page_text()}")

    def page_text(self) -> str:
        return self.css("body").text

    def login(self, password: str, user: str = "admin") -> None:
        self.get("/admin/login/")
        self.css("input[name=username]").send_keys(user)
        self.css("input[name=password]").send_keys(password)
        self.css("input[type=submit]").click()
        self.wait(lambda: "/admin/login/" not in self.browser.current_url, "the login")

    def search(self, query: str = QUERY, mode: str = "hybrid") -> None:
        from urllib.parse import urlencode

        self.get(f"/?{urlencode({'q': query, 'mode': mode})}")
        self.wait(lambda: self.texts(".result .title"), "search results")

    def run_action(self, changelist: str, action: str, rows: str = "all") -> None:
        """Select ``rows`` ("all", or a row's link text) on a changelist and run ``action``."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        self.get(changelist)
        if rows == "all":
            self.css("#action-toggle").click()
            across = self.browser.find_elements(By.CSS_SELECTOR, ".actions .question a")
            if across and across[0].is_displayed():  # more rows than one page: all of them
                across[0].click()
        else:
            row = self.browser.find_element(
                By.XPATH, f"//tr[.//a[contains(., '{rows}')]]//input[@name='_selected_action']"
            )
            row.click()
        Select(self.css("select[name=action]")).select_by_value(action)
        self.css("button[name=index]").click()

    def fine_tune(self) -> int:
        """Select every training pair, start a run with the default recipe; the run's id once
        it has succeeded (its page reloads itself while it goes)."""
        self.run_action("/admin/django_sbert/trainingpair/", "fine_tune_encoder")
        start = "form input[type=submit][value='Start training']"
        self.wait(lambda: self.browser.find_elements("css selector", start), "the run form")
        self.css(start).click()
        self.wait(lambda: "/trainingrun/" in self.browser.current_url, "the run's page")
        run = int(re.search(r"/trainingrun/(\d+)/", self.browser.current_url)[1])
        self.wait_for_run(run)
        return run

    def run_status(self) -> str:
        return self.css(".field-status .readonly").text.strip().lower()

    def wait_for_run(self, run: int) -> None:
        self.get(f"/admin/django_sbert/trainingrun/{run}/change/")
        status = self.wait(
            lambda: self.run_status() in ("succeeded", "failed", "cancelled") and self.run_status(),
            f"training run {run} to finish",
            reload=True,
        )
        if status != "succeeded":
            raise RuntimeError(f"Training run {run} {status}:\n{self.page_text()}")

    def candidate_of(self, run: int) -> tuple[int, str]:
        """(pk, version) of the run's candidate, from the run's page."""
        self.get(f"/admin/django_sbert/trainingrun/{run}/change/")
        link = self.css(".field-candidate_link a")
        return int(re.search(r"/encoderversion/(\d+)/", link.get_attribute("href"))[1]), link.text

    def version_status(self, pk: int) -> str:
        self.get(f"/admin/django_sbert/encoderversion/{pk}/change/")
        return self.css(".field-status .readonly").text.strip().lower()

    def promote(self, version: str, pk: int, action: str = "promote") -> str:
        """Run a promotion action on ``version``; the success message, once it serves."""
        self.run_action("/admin/django_sbert/encoderversion/", action, rows=version)
        # The message is on the page the action redirects to: wait for it to load.
        message = self.wait(lambda: " ".join(self.texts(".messagelist li")), "the message")
        self.wait(lambda: self.version_status(pk) == "active", f"{version} to serve")
        return message

    def compare(self, pk: int, query: str | None = None) -> None:
        from urllib.parse import urlencode

        suffix = f"?{urlencode({'q': query})}" if query else ""
        self.get(f"/admin/django_sbert/encoderversion/{pk}/compare/{suffix}")
        self.wait(lambda: self.texts("#sbert-before-after"), "the Before and after page")

    def latest_run(self) -> int | None:
        """The newest succeeded run listed in the admin, if any."""
        self.get("/admin/django_sbert/trainingrun/?status__exact=succeeded")
        ids = self.texts("#result_list tbody th a, #result_list tbody td.field-id a")
        return int(ids[0]) if ids else None


def shoot(browser: Any, path: Path, selector: str | None = None) -> Path:
    """Save the page (or the element ``selector``) as ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if selector:
        from selenium.webdriver.common.by import By

        browser.find_element(By.CSS_SELECTOR, selector).screenshot(str(path))
    else:
        browser.save_screenshot(str(path))
    return path


def take(walk: Walkthrough, out: Path) -> list[Path]:
    """The README's pictures from the demo ``walk`` is logged in to."""
    walk.search(QUERY, "hybrid")
    shots = [shoot(walk.browser, out / "search.png")]
    run = walk.latest_run() or walk.fine_tune()
    walk.get(f"/admin/django_sbert/trainingrun/{run}/change/")
    shots.append(shoot(walk.browser, out / "training-run.png", "#content"))
    pk, _ = walk.candidate_of(run)
    walk.compare(pk)
    shots.append(shoot(walk.browser, out / "before-after.png", "#content"))
    return shots


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--password",
        default=os.environ.get("DEMO_PASSWORD"),
        help="The demo admin's password (printed by the first `make demo`); or DEMO_PASSWORD.",
    )
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"))
    args = parser.parse_args(argv)
    if not args.password:
        parser.error("--password (or DEMO_PASSWORD) is needed to log in to the admin.")
    browser = chromium()
    try:
        walk = Walkthrough(browser, args.url)
        walk.login(args.password)
        for path in take(walk, Path(args.out)):
            print(path)
    finally:
        browser.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
