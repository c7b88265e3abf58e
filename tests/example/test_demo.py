"""``make demo`` end to end: the example site in a real browser, Ctrl-C, and a second start.

``demo.py`` runs as a newcomer runs it (its own embedded PostgreSQL, a Celery worker on the
filesystem broker, ``runserver``, the real all-MiniLM-L6-v2), with 60 articles (the newest of
each category) so the worker encodes them in seconds. Headless Chromium (Debian's
``chromium`` with its ``chromium-driver``, driven by Selenium) searches the site, pages,
filters, follows "More like this", logs in to the admin with the printed password, and sees
the "N of M embedded" notice; the screenshots are kept in ``artifacts/screenshots/``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import psutil
import pytest

from tests.example.conftest import ARTIFACTS, DEMO_ARTICLES, DemoProcess

pytestmark = [pytest.mark.example, pytest.mark.slow]

QUERY = "reporters held by Pyongyang"
EXPECTED = "North Korean military detains two American journalists"
ALL_EMBEDDED = rf"All {DEMO_ARTICLES} articles (are )?embedded"
INSTALL_HINT = (
    "The browser test needs Debian's Chromium and its driver: "
    "`sudo apt-get install chromium chromium-driver` (`make test` runs `make browser`, which "
    "installs them when run as root)."
)


@pytest.fixture(scope="module")
def demo(start_demo) -> DemoProcess:
    run = start_demo()
    run.wait_for(r"Serving at http://", timeout=240)
    run.wait_for(ALL_EMBEDDED, timeout=300)
    return run


@pytest.fixture(scope="module")
def browser() -> Iterator:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.fail(f"chromium or chromedriver not found on PATH. {INSTALL_HINT}", pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1200,1300",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    # An explicit driver path: Selenium Manager is never asked to download anything.
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _results(browser) -> tuple[list[str], list[float]]:
    from selenium.webdriver.common.by import By

    titles = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".result .title")]
    scores = [float(e.text) for e in browser.find_elements(By.CSS_SELECTOR, ".result .num")]
    return titles, scores


def test_search_in_a_browser(demo: DemoProcess, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(f"{demo.url}/")
    assert f"Search {DEMO_ARTICLES} news articles by meaning" in browser.page_source
    box = browser.find_element(By.NAME, "q")
    box.send_keys(QUERY, Keys.ENTER)
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".result"))

    titles, scores = _results(browser)
    assert len(titles) == 10, titles  # the first page of the ranking
    assert scores == sorted(scores, reverse=True), scores
    assert EXPECTED in titles[:3], titles  # no word of the query is in the title
    bars = browser.find_elements(By.CSS_SELECTOR, ".result .bar span")
    assert bars[0].get_attribute("style").startswith("width: ")
    (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "screenshots" / "search.png"))

    # Page 2 continues the same ranking.
    browser.find_element(By.LINK_TEXT, "2").click()
    WebDriverWait(browser, 60).until(lambda b: "page=2" in b.current_url)
    page_two, page_two_scores = _results(browser)
    assert page_two and not set(page_two) & set(titles)
    assert max(page_two_scores) <= min(scores)

    # The category filter keeps the query and narrows the ranking to that category.
    Select(browser.find_element(By.NAME, "category")).select_by_value("economy")
    browser.find_element(By.CSS_SELECTOR, ".search button").click()
    WebDriverWait(browser, 60).until(lambda b: "category=economy" in b.current_url)
    metas = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".result .meta")]
    assert metas and all(m.startswith(("Economy & business", "Economy & politics")) for m in metas)

    # "More like this" on a result, then the article page with its Wikinews credit.
    browser.get(f"{demo.url}/?q={QUERY}")
    browser.find_element(By.CSS_SELECTOR, ".result .more").click()
    WebDriverWait(browser, 60).until(lambda b: "like=" in b.current_url)
    assert "Articles like" in browser.find_element(By.CSS_SELECTOR, ".summary").text
    browser.find_element(By.CSS_SELECTOR, ".summary a").click()
    WebDriverWait(browser, 60).until(lambda b: "/articles/" in b.current_url)
    credit = browser.find_element(By.CSS_SELECTOR, ".credit a")
    assert credit.get_attribute("href").startswith("https://en.wikinews.org/wiki/")
    assert "Wikinews" in credit.text
    assert len(browser.find_elements(By.CSS_SELECTOR, ".similar .result")) == 6
    browser.save_screenshot(str(ARTIFACTS / "screenshots" / "article.png"))


def test_admin_with_the_printed_login(demo: DemoProcess, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    password = demo.wait_for(r"Admin login: admin / (\S+)", timeout=5)[1]
    browser.get(f"{demo.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 60).until(lambda b: "/admin/login/" not in b.current_url)
    assert "Site administration" in browser.title
    browser.get(f"{demo.url}/admin/articles/article/?q={QUERY}")
    rows = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")]
    assert rows and EXPECTED in rows[0], rows  # EmbeddingAdminMixin ranks by meaning
    article = browser.find_element(By.CSS_SELECTOR, "#result_list tbody tr th a")
    article.click()
    WebDriverWait(browser, 60).until(lambda b: "/change/" in b.current_url)
    assert "Server Error" not in browser.title and EXPECTED in browser.page_source
    browser.get(f"{demo.url}/admin/django_sbert/")  # the fine-tuning workflow's models
    assert "Django site admin" in browser.title, browser.title
    browser.get(f"{demo.url}/api/sbert/")
    assert "search" in browser.page_source and "Django REST framework" in browser.page_source


def _unembed(demo: DemoProcess, rows: int) -> list[int]:
    """Drop the vectors of a few articles, as if the worker had lost its last tasks."""
    import psycopg

    lines = (demo.var_dir / "pgdata" / "postmaster.pid").read_text().splitlines()
    port, socket_dir = lines[3], lines[4]
    with psycopg.connect(host=socket_dir, port=port, user="postgres", dbname="postgres") as conn:
        cursor = conn.execute(
            "UPDATE articles_article SET embedding = NULL WHERE id IN "
            "(SELECT id FROM articles_article ORDER BY id LIMIT %s) RETURNING id",
            [rows],
        )
        return [row[0] for row in cursor.fetchall()]


def test_partial_index_is_announced(demo: DemoProcess, browser) -> None:
    from selenium.webdriver.common.by import By

    pending = _unembed(demo, 3)
    browser.get(f"{demo.url}/")
    notice = browser.find_element(By.ID, "coverage").text
    assert f"{DEMO_ARTICLES - 3} of {DEMO_ARTICLES} articles embedded" in notice
    assert "search covers those" in notice
    browser.get(f"{demo.url}/?q={QUERY}")
    shown = {e.get_attribute("href") for e in browser.find_elements(By.CSS_SELECTOR, ".title")}
    assert not {f"{demo.url}/articles/{pk}/" for pk in pending} & shown
    browser.get(f"{demo.url}/?like={pending[0]}")
    assert "is not embedded yet" in browser.find_element(By.ID, "like-pending").text
    browser.get(f"{demo.url}/articles/{pending[0]}/")
    assert "not embedded yet" in browser.find_element(By.CSS_SELECTOR, ".similar").text


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid)]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def test_ctrl_c_stops_everything_and_a_second_run_reuses_the_data(demo, start_demo) -> None:
    # Ctrl-C: the worker, the web server and the embedded PostgreSQL all stop.
    children = [p.pid for p in demo.descendants()]
    postmaster = demo.postmaster_pid()
    assert len(children) >= 2 and postmaster is not None
    assert demo.interrupt(timeout=60) == 0
    assert "Stopped the worker, the web server and the database." in demo.output
    left = _wait_gone([*children, postmaster], timeout=15)
    assert not left, f"still running after Ctrl-C: {[psutil.Process(p).cmdline() for p in left]}"

    # Again: the data is reused (no second load, no new password), it serves in seconds,
    # and the rows whose vectors were dropped above are queued again and embedded.
    again = start_demo()
    ready = float(again.wait_for(r"Serving at \S+ +\(ready in ([\d.]+) s\)", timeout=120)[1])
    assert "Loaded" not in again.output
    assert "password printed on the first run" in again.output
    assert ready < 30, f"second start took {ready} s"
    again.wait_for(ALL_EMBEDDED, timeout=180)
    children = [p.pid for p in again.descendants()]
    postmaster = again.postmaster_pid()
    assert again.interrupt(timeout=60) == 0
    assert not _wait_gone([*children, postmaster], timeout=15)
