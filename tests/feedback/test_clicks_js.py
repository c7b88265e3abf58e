"""The template tags and clicks.js: a result link marked on a page, a click in Chromium, the
event stored."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.template import engines

import django_sbert
from django_sbert.models import SearchEvent, SearchLog

pytestmark = pytest.mark.urls("tests.feedback.urls")

SCRIPT = Path(django_sbert.__file__).parent / "static" / "django_sbert" / "clicks.js"


def render(source: str, **context) -> str:
    return engines["django"].from_string("{% load sbert %}" + source).render(context)


def test_the_script_is_small():
    assert SCRIPT.stat().st_size < 2048


@pytest.mark.django_db
def test_the_tags_mark_logged_results_only(client, articles, log_on, settings):
    settings.STATIC_URL = "/static/"
    page = client.get("/hits/", {"q": "a dog"}).content.decode()
    entry = SearchLog.objects.get()
    assert page.count("data-sbert-click=") == entry.result_count == 5
    assert 'src="/static/django_sbert/clicks.js" data-sbert-click-url="/sbert/click/"' in page
    assert render("{% sbert_click_attrs hit %}", hit=articles[0]) == ""  # not logged


def test_the_script_tag_is_left_out_with_the_log_off_or_without_the_url(settings, caplog):
    settings.SBERT = {**settings.SBERT, "FEEDBACK": {"LOG": False}}
    assert render("{% sbert_click_script %}") == ""
    settings.SBERT = {**settings.SBERT, "FEEDBACK": {"LOG": True}}
    settings.ROOT_URLCONF = "tests.api.urls"  # django_sbert.urls not mounted
    assert render("{% sbert_click_script %}") == ""
    assert "django_sbert.urls" in caplog.text


@pytest.fixture
def chromium():
    paths = shutil.which("chromium"), shutil.which("chromedriver")
    if not all(paths):
        pytest.skip("chromium and chromedriver are not installed (apt install chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def site(settings) -> Iterator[str]:
    """The test URLs served over HTTP in a thread (pytest-django's live_server needs
    django.contrib.staticfiles and a STATIC_URL from the start; these tests have neither)."""
    settings.STATIC_URL = "/static/"
    settings.ROOT_URLCONF = "tests.feedback.urls"
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    server = ThreadedWSGIServer(("127.0.0.1", 0), WSGIRequestHandler)
    server.set_app(WSGIHandler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.django_db(transaction=True)
def test_a_click_in_a_browser_is_stored(chromium, site, articles, log_on):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chromium.get(f"{site}/hits/?q=a+dog")
    links = chromium.find_elements(By.CSS_SELECTOR, "a.hit")
    assert len(links) == 5
    clicked = links[1].get_attribute("href").rstrip("/").rsplit("/", 1)[1]
    WebDriverWait(chromium, 10).until(lambda d: d.execute_script("return !!window.sbertEvent"))
    links[1].click()
    WebDriverWait(chromium, 10).until(lambda d: d.find_elements(By.ID, "landed"))
    deadline = time.monotonic() + 10
    while not SearchEvent.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    event = SearchEvent.objects.get()
    assert (event.object_pk, event.position, event.kind) == (clicked, 2, "click")
    assert event.search_id == SearchLog.objects.get().pk
