/* django-sbert search-as-you-type. Every <input data-sbert-suggest-url="..."> gets a listbox of
   suggestions under it (class "sbert-suggestions"), from SuggestView or the API's suggest/:
   {"results": [{"id", "label", "url"}]}. Typing is debounced (150 ms) and a newer request
   aborts the one before. Arrow keys move, Enter follows the chosen suggestion, Escape closes.
   Optional: data-sbert-suggest-k (how many). A suggestion's url is followed only when it is
   http(s) or relative (a "javascript:" or "data:" URL from a row is shown as plain text). No
   framework. */
(function () {
  "use strict";
  var DELAY = 150, MIN_CHARS = 2, lists = 0;
  // Defaults with no specificity (:where), so any rule of the site's own CSS wins.
  var STYLE = ":where(.sbert-suggestions){position:absolute;z-index:1000;margin:0;padding:0;" +
    "list-style:none;background:#fff;color:#222;border:1px solid #ccc;border-radius:4px;" +
    "box-shadow:0 4px 12px rgba(0,0,0,.15)}:where(.sbert-suggestions a){display:block;" +
    "padding:.4em .75em;color:inherit;text-decoration:none;cursor:pointer}" +
    ":where(.sbert-suggestions [aria-selected=true]){background:#e8eefc}";

  // The absolute http(s) URL of a suggestion's url (relative ones resolved), else null.
  function safeUrl(value) {
    if (typeof value !== "string" || !value) return null;
    try {
      var url = new URL(value, window.location.href);
      return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
    } catch (error) {
      return null;
    }
  }

  function attach(input) {
    if (input.getAttribute("aria-controls")) return; // loaded twice: attached already
    var list = document.createElement("ul"), timer = null, request = null, items = [], active = -1;
    list.id = "sbert-suggestions-" + ++lists;
    list.className = "sbert-suggestions";
    list.setAttribute("role", "listbox");
    list.hidden = true;
    input.after(list);
    [["role", "combobox"], ["aria-autocomplete", "list"], ["aria-controls", list.id],
     ["aria-expanded", "false"], ["autocomplete", "off"]].forEach(function (pair) {
      input.setAttribute(pair[0], pair[1]);
    });

    function select(i) {
      active = i;
      items.forEach(function (li, j) { li.setAttribute("aria-selected", String(j === i)); });
      if (i < 0) input.removeAttribute("aria-activedescendant");
      else input.setAttribute("aria-activedescendant", items[i].id);
    }
    function show(results) {
      list.textContent = "";
      items = results.map(function (result, i) {
        var li = document.createElement("li"), link = document.createElement("a");
        li.id = list.id + "-" + i;
        li.setAttribute("role", "option");
        link.textContent = result.label || String(result.id);
        var href = safeUrl(result.url);
        if (href) link.href = href;
        link.tabIndex = -1;
        li.appendChild(link);
        li.addEventListener("mousedown", function (event) { event.preventDefault(); choose(i); });
        return list.appendChild(li);
      });
      list.hidden = !items.length;
      // Under the input, out of the page's flow (the list shares the input's offsetParent).
      list.style.left = input.offsetLeft + "px";
      list.style.top = input.offsetTop + input.offsetHeight + "px";
      list.style.minWidth = input.offsetWidth + "px";
      input.setAttribute("aria-expanded", String(!list.hidden));
      select(-1);
    }
    function close() {
      if (request) request.abort();
      show([]);
    }
    function choose(i) {
      var link = items[i].firstChild;
      var href = safeUrl(link.getAttribute("href"));
      if (href) window.location.assign(href);
      else { input.value = link.textContent; close(); }
    }
    function load() {
      if (request) request.abort();
      if (input.value.trim().length < MIN_CHARS) return close();
      var url = new URL(input.dataset.sbertSuggestUrl, window.location.href);
      url.searchParams.set("q", input.value);
      if (input.dataset.sbertSuggestK) url.searchParams.set("k", input.dataset.sbertSuggestK);
      request = new AbortController();
      fetch(url, { signal: request.signal, headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : { results: [] }; })
        .then(function (body) { show(body.results || []); })
        .catch(function (error) { if (error.name !== "AbortError") show([]); });
    }

    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(load, DELAY);
    });
    input.addEventListener("keydown", function (event) {
      var n = items.length;
      if (list.hidden || !n) return;
      if (event.key === "ArrowDown") select((active + 1) % n);
      else if (event.key === "ArrowUp") select(active <= 0 ? n - 1 : active - 1);
      else if (event.key === "Enter" && active >= 0) choose(active);
      else if (event.key === "Escape") close();
      else return;
      event.preventDefault();
    });
    input.addEventListener("blur", function () { clearTimeout(timer); close(); });
  }

  function start() {
    var inputs = document.querySelectorAll("input[data-sbert-suggest-url]"), style;
    if (!inputs.length) return;
    style = document.createElement("style");
    style.textContent = STYLE;
    document.head.prepend(style);
    inputs.forEach(attach);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
