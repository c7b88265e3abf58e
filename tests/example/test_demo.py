"""``make demo`` end to end: the example site in a real browser, Ctrl-C, and a second start.

``demo.py`` runs as a newcomer runs it (its own embedded PostgreSQL, a Celery worker on the
filesystem broker, ``runserver``, the real all-MiniLM-L6-v2), with 60 articles (the newest of
each category) so the worker encodes them in seconds. Headless Chromium (Debian's
``chromium`` with its ``chromium-driver``, driven by Selenium) searches the site, pages,
filters, follows "More like this", types into the search box and picks a suggestion, logs in
to the admin with the printed password, and sees the "N of M embedded" notice; the
screenshots are kept in ``artifacts/screenshots/``.

The first start is in a new folder (its compile cache empty, as on a new host): the demo
prints its URL only once the first search needs no model load or compile, which the first
search after the URL checks, and the first page of results once the articles are embedded.
"""

from __future__ import annotations

import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest

from django_sbert.encoder.paths import compiler_available
from tests.example.conftest import ARTIFACTS, DEMO_ARTICLES, DemoProcess, chromium_paths

pytestmark = [pytest.mark.example, pytest.mark.slow]

QUERY = "reporters arrested by Pyongyang"
EXPECTED = "North Korean military detains two American journalists"
ALL_EMBEDDED = rf"All {DEMO_ARTICLES} articles (are )?embedded"
# Another text than QUERY's: the browser's first search of QUERY encodes it.
FIRST_QUERY = "journalists detained in North Korea"
# The query's graph: torch's compiled one, or ONNX Runtime's where that path encodes queries
# (a CPU without native bf16: encoder.md, "Which path each process takes").
GRAPH = re.compile(r"(Built|Loaded) the compiled query graph|(Exported|Loaded) the query graph")
# Far above a warm encode (milliseconds) even on a loaded machine; far below building the
# graph (30-40 s on 2 idle cores) or loading the model (seconds).
FIRST_ENCODE_BOUND_MS = 3000.0
# The first page with results marks each one's best sentence, a batch encode: under a second
# eager, where building a batch graph on that request took 13 to 16 s on a fast CPU.
FIRST_PAGE_BOUND_S = 6.0


@dataclass(frozen=True)
class FirstSearch:
    """The first search of a new demo, sent as soon as its URL was printed."""

    log_before: str  # the web process's log when the URL was printed
    page: str  # the search's page
    log_during: str  # what the web process logged while answering it
    # once every article is embedded, the first page of results (with their passages marked)
    results_page: str
    results_seconds: float  # how long that page took


def web_log(run: DemoProcess) -> str:
    return (run.var_dir / "logs" / "web.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def first_run(start_demo) -> tuple[DemoProcess, FirstSearch]:
    """The demo's first start, in a new folder: its first search, and its first page of
    results once every article is embedded."""
    run = start_demo()
    run.wait_for(r"Serving at http://", timeout=240)
    before = web_log(run)
    query = urllib.parse.urlencode({"q": FIRST_QUERY})
    with urllib.request.urlopen(f"{run.url}/?{query}", timeout=300) as response:
        page = response.read().decode()
    during = web_log(run)[len(before) :]
    run.wait_for(ALL_EMBEDDED, timeout=300)
    started = time.perf_counter()
    with urllib.request.urlopen(f"{run.url}/?{query}", timeout=300) as response:
        results = response.read().decode()
    return run, FirstSearch(before, page, during, results, time.perf_counter() - started)


@pytest.fixture(scope="module")
def demo(first_run) -> DemoProcess:
    return first_run[0]


def test_the_first_search_after_the_url_is_printed_encodes_on_a_warm_process(first_run) -> None:
    """The web process logs when it has its query graph and prints "query encoder ready"
    before it opens its port; the demo prints "Serving at" only once ``sbert/health/``
    answers 200. The first search's page shows how long encoding the query took in the
    server: milliseconds, where building the graph on that request would take tens of
    seconds."""
    _, first = first_run
    assert "query encoder ready" in first.log_before, first.log_before[-3000:]
    if compiler_available():  # the compiled path: its graph was there before the URL
        assert GRAPH.search(first.log_before), first.log_before[-3000:]
    encoded = re.search(r"encoding the query\s+([\d.,]+)\s*ms", first.page)
    assert encoded, first.page[-3000:]
    assert float(encoded.group(1).replace(",", "")) < FIRST_ENCODE_BOUND_MS
    assert not GRAPH.search(first.log_during), first.log_during  # nothing built on the request
    # Once the articles are embedded, the first page of results marks their best sentences
    # without building anything on the request either.
    assert 'class="snippet passage"' in first.results_page, first.results_page[-3000:]
    assert first.results_seconds < FIRST_PAGE_BOUND_S


@pytest.fixture(scope="module")
def browser() -> Iterator:
    chromium, driver_path = chromium_paths()
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
    shown = ".result .sbert-similarity-value, .result .sbert-keyword-score"
    scores = [float(e.text) for e in browser.find_elements(By.CSS_SELECTOR, shown)]
    return titles, scores


def _timing(browser) -> tuple[float, float | None, float]:
    """The timings line under the results: (total, encoding or None, database query) in ms."""
    from selenium.webdriver.common.by import By

    text = browser.find_element(By.ID, "timings").text
    match = re.search(
        r"Search took ([\d.]+) ms: (?:encoding the query ([\d.]+) ms(?: \(cached\))?|"
        r"no query to encode), the database query ([\d.]+) ms",
        text,
    )
    assert match, text
    total, encode, query = match.groups()
    return float(total), float(encode) if encode else None, float(query)


def _switch_mode(browser, label: str, mode: str) -> None:
    """Click a mode of the switch: the page searches again in that mode at once."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = browser.find_element(By.ID, "timings")
    browser.find_element(
        By.XPATH, f"//fieldset[@id='modes']//label[contains(., '{label}')]"
    ).click()
    WebDriverWait(browser, 60).until(lambda b: f"mode={mode}" in b.current_url)
    WebDriverWait(browser, 60).until(lambda b: not _is_attached(old))
    checked = browser.find_element(By.CSS_SELECTOR, "#modes input:checked")
    assert checked.get_attribute("value") == mode


def _is_attached(element) -> bool:
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return False
    return True


def test_search_in_a_browser(browser, demo: DemoProcess) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(f"{demo.url}/")
    assert f"Search {DEMO_ARTICLES} news articles by meaning" in browser.page_source
    assert (
        browser.find_element(By.CSS_SELECTOR, "#modes input:checked").get_attribute("value")
        == "hybrid"
    )  # the default mode
    box = browser.find_element(By.NAME, "q")
    box.send_keys(QUERY, Keys.ENTER)
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".result"))

    # Hybrid: each result shows its similarity and its place in each fused list.
    titles, scores = _results(browser)
    assert len(titles) == 10, titles  # the first page of the ranking
    assert EXPECTED in titles[:3], titles  # no word of the query is in the title
    ranks = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".result .ranks")]
    place = re.compile(r"meaning (#\d+|–) · words (#\d+|–)")
    assert len(ranks) == 10 and all(place.search(r) for r in ranks), ranks
    assert any("meaning #" in r for r in ranks) and any("words #" in r for r in ranks), ranks
    total, encode, query = _timing(browser)
    assert encode is not None and query > 0 and total == pytest.approx(encode + query, abs=0.11)
    bars = browser.find_elements(By.CSS_SELECTOR, ".result meter.sbert-similarity-bar")
    assert 0 < float(bars[0].get_attribute("value")) <= 1
    (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "screenshots" / "search.png"))

    # Meaning (vector search): nearest first, no ranks; the query vector is cached by now.
    _switch_mode(browser, "Meaning", "vector")
    titles, scores = _results(browser)
    assert len(titles) == 10 and EXPECTED in titles[:3], titles
    assert scores == sorted(scores, reverse=True), scores
    assert not browser.find_elements(By.CSS_SELECTOR, ".result .ranks")
    assert "(cached)" in browser.find_element(By.ID, "timings").text

    # Words (keyword search): PostgreSQL full text alone, nothing to encode.
    _switch_mode(browser, "Words", "keyword")
    _, keyword_scores = _results(browser)
    assert keyword_scores == sorted(keyword_scores, reverse=True), keyword_scores
    assert _timing(browser)[1] is None
    _switch_mode(browser, "Meaning", "vector")

    # Page 2 continues the same ranking.
    browser.find_element(By.LINK_TEXT, "2").click()
    WebDriverWait(browser, 60).until(lambda b: "page=2" in b.current_url)
    assert "mode=vector" in browser.current_url
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
    assert _timing(browser)[1] is None  # the article's stored vector: nothing to encode
    browser.find_element(By.CSS_SELECTOR, ".summary a").click()
    WebDriverWait(browser, 60).until(lambda b: "/articles/" in b.current_url)
    credit = browser.find_element(By.CSS_SELECTOR, ".credit a")
    assert credit.get_attribute("href").startswith("https://en.wikinews.org/wiki/")
    assert "Wikinews" in credit.text
    assert len(browser.find_elements(By.CSS_SELECTOR, ".similar .result")) == 6
    browser.save_screenshot(str(ARTIFACTS / "screenshots" / "article.png"))


def _suggestions(browser) -> list:
    """The options of the search box's listbox while it is shown (else [])."""
    from selenium.webdriver.common.by import By

    for listbox in browser.find_elements(By.CSS_SELECTOR, "[role=listbox]"):
        if listbox.is_displayed():
            return listbox.find_elements(By.CSS_SELECTOR, "[role=option]")
    return []


def test_suggestions_while_typing(browser, demo: DemoProcess) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{demo.url}/")
    box = browser.find_element(By.NAME, "q")
    assert box.get_attribute("data-sbert-suggest-url")
    box.clear()
    for char in "north korean jour":  # typed key by key: the last word is unfinished
        box.send_keys(char)
    WebDriverWait(browser, 30).until(lambda b: EXPECTED in [o.text for o in _suggestions(b)])
    options = _suggestions(browser)
    assert 1 <= len(options) <= 5
    assert box.get_attribute("role") == "combobox"
    assert box.get_attribute("aria-expanded") == "true"
    links = [o.find_element(By.TAG_NAME, "a").get_attribute("href") for o in options]
    assert all("/articles/" in link for link in links), links
    (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "screenshots" / "suggest.png"))

    # Arrow keys choose, Escape closes, Enter follows the chosen suggestion.
    box.send_keys(Keys.ARROW_DOWN)
    assert box.get_attribute("aria-activedescendant") == options[0].get_attribute("id")
    assert options[0].get_attribute("aria-selected") == "true"
    box.send_keys(Keys.ESCAPE)
    WebDriverWait(browser, 5).until(lambda b: not _suggestions(b))
    assert box.get_attribute("aria-expanded") == "false"
    box.send_keys("n")  # typing again brings them back
    WebDriverWait(browser, 30).until(lambda b: EXPECTED in [o.text for o in _suggestions(b)])
    position = [o.text for o in _suggestions(browser)].index(EXPECTED)
    for _ in range(position + 1):
        box.send_keys(Keys.ARROW_DOWN)
    box.send_keys(Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda b: "/articles/" in b.current_url)
    assert EXPECTED in browser.find_element(By.TAG_NAME, "h1").text


def test_admin_with_the_printed_login(browser, demo: DemoProcess) -> None:
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


def _http(
    demo: DemoProcess, path: str, body: dict | None = None, login: str | None = None
) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of a request to the running demo; ``login`` is the admin's
    password, sent with HTTP Basic authentication."""
    import base64
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{demo.url}{path}")
    request.add_header("Accept", "application/json")
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    if login is not None:
        token = base64.b64encode(f"admin:{login}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"{}"), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), dict(error.headers)


def test_api_search_modes_and_who_may_do_what(demo: DemoProcess) -> None:
    """Over HTTP: anyone may search (hybrid too, now that the model has keyword search);
    embed/ needs a login, the fine-tuning endpoints a staff login; static files are served
    with DEBUG off."""
    search = f"/api/sbert/search/?model=articles.article&q={QUERY.replace(' ', '+')}"
    status, body, _ = _http(demo, f"{search}&mode=hybrid")
    assert status == 200, body
    hits = body["results"]
    assert EXPECTED in [hit["object"]["title"] for hit in hits[:3]], hits
    assert {"score", "similarity", "vector_rank", "keyword_rank"} <= set(hits[0]), hits[0]
    status, body, _ = _http(demo, f"{search}&mode=keyword")
    assert status == 200 and all("keyword_score" in hit for hit in body["results"]), body
    assert _http(demo, "/api/sbert/")[0] == 200  # the API root lists the endpoints

    status, body, _ = _http(demo, "/api/sbert/embed/", {"texts": ["interest rates"]})
    assert status == 403 and "credentials were not provided" in body["detail"], body
    assert _http(demo, "/api/sbert/training-runs/")[0] == 403
    assert _http(demo, "/api/sbert/pairs/")[0] == 403

    password = demo.wait_for(r"Admin login: admin / (\S+)", timeout=5)[1]
    status, body, _ = _http(demo, "/api/sbert/embed/", {"texts": ["interest rates"]}, password)
    assert status == 200 and len(body["vectors"][0]) == 384, body
    assert _http(demo, "/api/sbert/training-runs/", login=password)[0] == 200

    # DEBUG is off (the demo's default), so runserver serves no static files: WhiteNoise does.
    status, _, headers = _http_raw(demo, "/static/articles/site.css")
    assert status == 200 and "text/css" in headers.get("Content-Type", ""), headers
    status, _, _ = _http_raw(demo, "/no-such-page/")
    assert status == 404
    # A keyword search of stop words finds nothing, and the page does not blame embeddings.
    status, page, _ = _http_raw(demo, "/?q=the+and+of&mode=keyword")
    assert status == 200 and b"No article holds these words." in page, page[-2000:]


def test_anonymous_api_searches_are_rate_limited(demo: DemoProcess) -> None:
    """SBERT_SEARCH_RATE (60/minute by default): an anonymous client gets 429 with
    Retry-After once over it, while a logged-in user is counted apart."""
    path = "/api/sbert/search/?model=articles.article&mode=keyword&q=oil+prices"
    statuses = []
    for _ in range(70):
        status, _, headers = _http(demo, path)
        statuses.append(status)
        if status == 429:
            break
    assert statuses[-1] == 429, statuses
    assert set(statuses[:-1]) == {200} and len(statuses) <= 61, statuses
    assert int(headers["Retry-After"]) > 0
    password = demo.wait_for(r"Admin login: admin / (\S+)", timeout=5)[1]
    assert _http(demo, path, login=password)[0] == 200


def _http_raw(demo: DemoProcess, path: str) -> tuple[int, bytes, dict]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{demo.url}{path}", timeout=60) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


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


def test_partial_index_is_announced(browser, demo: DemoProcess) -> None:
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
    assert (
        "Stopped the worker, the training worker, the web server and the database." in demo.output
    )
    left = _wait_gone([*children, postmaster], timeout=15)
    assert not left, f"still running after Ctrl-C: {[psutil.Process(p).cmdline() for p in left]}"

    # Again: the data is reused (no second load, no new password), it serves in seconds,
    # and the rows whose vectors were dropped above are queued again and embedded.
    again = start_demo()
    ready = float(again.wait_for(r"Serving at \S+ +\(ready in ([\d.]+) s\)", timeout=240)[1])
    assert "Loaded" not in again.output
    assert "password printed on the first run" in again.output
    assert ready < 30, f"second start took {ready} s"
    again.wait_for(ALL_EMBEDDED, timeout=300)
    children = [p.pid for p in again.descendants()]
    postmaster = again.postmaster_pid()
    assert again.interrupt(timeout=60) == 0
    assert not _wait_gone([*children, postmaster], timeout=15)
