/* django-sbert click reports. A link marked data-sbert-click="<token>" (the sbert_click_attrs
   tag) reports its click to this script's data-sbert-click-url (sbert/click/) with
   navigator.sendBeacon, which never delays following the link; a middle click counts too.
   window.sbertEvent(token, kind) reports a conversion ("add_to_cart"...). No framework. */
(function () {
  "use strict";
  var script = document.currentScript,
    url = script && script.getAttribute("data-sbert-click-url");
  if (!url || !navigator.sendBeacon) return;

  function send(token, kind) {
    var body = new URLSearchParams();
    body.set("token", token);
    body.set("kind", kind || "click");
    return navigator.sendBeacon(url, body);
  }

  function report(event) {
    if (event.type === "auxclick" && event.button !== 1) return;
    var link = event.target.closest && event.target.closest("[data-sbert-click]");
    if (link) send(link.getAttribute("data-sbert-click"), "click");
  }

  document.addEventListener("click", report, true);
  document.addEventListener("auxclick", report, true);
  window.sbertEvent = send;
})();
