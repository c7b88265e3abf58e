"""django_sbert/suggest.js follows a suggestion's url only when it is http(s) or relative
(issue 67, item 6): SuggestView's real answer, with rows whose ``get_absolute_url()`` gives a
``javascript:`` URL among others, fed to the real script run by Node.js over a minimal DOM."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import django_sbert
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.views.suggest_urls")]

SCRIPT = Path(django_sbert.__file__).parent / "static" / "django_sbert" / "suggest.js"

# Just enough of a browser for suggest.js: elements with attributes and listeners, a location
# whose assign() is recorded, fetch() answering the body SuggestView gave. Each suggestion is
# typed for, then clicked (mousedown), in turn; the script's own code decides what to follow.
HARNESS = r"""
const fs = require("fs");
const script = fs.readFileSync(process.argv[2], "utf8");
const body = fs.readFileSync(process.argv[3], "utf8");
const assigned = [], created = [];
function element(tag) {
  const el = {
    tagName: tag, attrs: {}, children: [], listeners: {}, style: {}, dataset: {}, hidden: false,
    offsetLeft: 0, offsetTop: 0, offsetHeight: 20, offsetWidth: 200, _text: "",
    setAttribute(k, v) { this.attrs[k] = String(v); },
    getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; },
    removeAttribute(k) { delete this.attrs[k]; },
    addEventListener(type, f) { (this.listeners[type] = this.listeners[type] || []).push(f); },
    fire(type) {
      (this.listeners[type] || []).forEach((f) => f({ preventDefault() {} }));
    },
    appendChild(child) { this.children.push(child); return child; },
    after() {}, prepend() {},
    get firstChild() { return this.children[0]; },
    get href() { return this.getAttribute("href") || ""; },
    set href(value) { this.attrs.href = String(value); },
    get textContent() { return this._text; },
    set textContent(value) { this._text = String(value); if (!value) this.children = []; },
  };
  created.push(el);
  return el;
}
const input = element("input");
input.dataset.sbertSuggestUrl = "/suggest/";
input.value = "";
const location = { href: "http://testserver/page/", assign: (url) => assigned.push(url) };
globalThis.window = { location };
globalThis.document = {
  readyState: "complete", head: element("head"),
  createElement: element, querySelectorAll: () => [input],
};
globalThis.fetch = async () => ({ ok: true, json: async () => JSON.parse(body) });
new Function(script)();
const list = created.find((el) => el.tagName === "ul");
const pause = (ms) => new Promise((done) => setTimeout(done, ms));
(async () => {
  const hrefs = [];
  const count = JSON.parse(body).results.length;
  for (let i = 0; i < count; i++) {
    input.value = "interest " + i;
    input.fire("input");
    await pause(250);
    hrefs.push(list.children[i].firstChild.getAttribute("href"));
    list.children[i].fire("mousedown");
  }
  console.log(JSON.stringify({ assigned, hrefs }));
})();
"""


def test_suggest_js_follows_only_http_and_relative_urls(client, monkeypatch, tmp_path, embed):
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("Node.js is not installed (apt install nodejs)")
    urls = [
        "javascript:alert(document.cookie)",
        "/articles/2/",
        "https://example.com/x",
        "data:text/html,hi",
    ]
    rows = embed(
        *Article.objects.bulk_create(Article(title=f"interest rates {i}") for i in range(4))
    )
    by_pk = {row.pk: url for row, url in zip(rows, urls, strict=True)}
    monkeypatch.setattr(Article, "get_absolute_url", lambda self: by_pk[self.pk], raising=False)
    answer = client.get("/suggest/", {"q": "interest rates", "k": 4})
    assert answer.status_code == 200
    body = answer.json()
    assert sorted(r["url"] for r in body["results"]) == sorted(urls)  # the view passes them on
    (tmp_path / "harness.js").write_text(HARNESS)
    (tmp_path / "body.json").write_text(json.dumps(body))
    run = subprocess.run(
        [node, str(tmp_path / "harness.js"), str(SCRIPT), str(tmp_path / "body.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    safe = {
        "/articles/2/": "http://testserver/articles/2/",
        "https://example.com/x": "https://example.com/x",
    }
    expected = [safe.get(r["url"]) for r in body["results"]]
    assert seen["hrefs"] == expected  # unsafe URLs: no link at all
    assert seen["assigned"] == [url for url in expected if url]
