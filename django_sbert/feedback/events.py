"""Recording what a visitor did with a logged result: ``record_event(request, token, kind)``.

Shared by the REST API's ``events/`` and the plain view ``sbert/click/``. An event is kept once
per (search, row, kind): the insert is ``ON CONFLICT DO NOTHING`` on that unique constraint,
so a repeated report (a double click, a retried beacon) changes nothing. Its client is the
search's own, copied by the insert itself (no read first), so events and searches are
forgotten together.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from django.db import connections, router
from django.utils import timezone

from ..conf import sbert_settings
from ..exceptions import EventRefused, InvalidToken
from ..models import SearchEvent, SearchLog
from .tokens import issued_within, read_token
from .visitors import is_bot, over_rate
from .writes import write

CLICK = "click"
MAX_DWELL_MS = 24 * 3600 * 1000  # a day: longer is a tab left open, not reading
# A token this fresh whose search is not in the log yet: its row is being written after the
# response (log.write_after_response); look again after these pauses (0.37 s in all).
FRESH_SECONDS = 5
RETRY_PAUSES = (0.02, 0.05, 0.1, 0.2)


def allowed_kinds() -> list[str]:
    """``"click"`` and ``SBERT["FEEDBACK"]["CONVERSIONS"]``."""
    return [CLICK, *(k for k in sbert_settings.FEEDBACK["CONVERSIONS"] if k != CLICK)]


def parse_dwell(value: Any) -> int | None:
    """``dwell_ms`` as an int from 0 to ``MAX_DWELL_MS`` (None for none): an int, or a string
    of ASCII digits (``"²"`` and other Unicode digits are refused, as ``int()`` would take
    some and not others); ``EventRefused`` otherwise."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_DWELL_MS:
        return value
    raise EventRefused(
        f"dwell_ms must be a whole number of milliseconds from 0 to {MAX_DWELL_MS}, in ASCII "
        "digits."
    )


def record_event(
    request: Any, token: str, kind: str = CLICK, dwell_ms: int | str | None = None
) -> bool:
    """Store ``kind`` for the result ``token`` names; True when stored or already there,
    False when ignored (a crawler's). ``EventRefused`` says why nothing was stored. The token
    is checked before ``dwell_ms`` is read (``parse_dwell``)."""
    if sbert_settings.FEEDBACK["LOG"] is False:  # True, or a share of the searches logged
        raise EventRefused(
            "Search logging is off on this site (SBERT['FEEDBACK']['LOG']); events are not "
            "recorded.",
            status=404,
        )
    if over_rate(request, "clicks"):
        raise EventRefused("Too many events from this client; try again later.", status=429)
    kinds = allowed_kinds()
    if kind not in kinds:
        raise EventRefused(f"Unknown event kind {kind!r}; this site accepts: {', '.join(kinds)}.")
    try:
        target = read_token(token)
    except InvalidToken as exc:
        raise EventRefused(str(exc)) from None
    dwell_ms = parse_dwell(dwell_ms)  # after the token: nothing of the body is read before it
    if is_bot(request):
        return False
    database = router.db_for_write(SearchEvent)
    params = [target.search_id, target.object_pk, target.position, kind, dwell_ms, timezone.now()]
    found = write(database, _event_sql(database), params, fetch=True)
    if (not found or not found[0]) and issued_within(token, FRESH_SECONDS):
        # The search is written once its response has been sent (log.write_after_response):
        # a click on a result that fast waits a moment for it.
        for pause in RETRY_PAUSES:
            time.sleep(pause)
            found = write(database, _event_sql(database), params, fetch=True)
            if found and found[0]:
                break
    if not found or not found[0]:  # purged or forgotten since the search
        raise EventRefused(
            "The search of this token is no longer in the log; nothing was stored.", status=410
        )
    return True


@functools.cache
def _event_sql(database: str) -> str:
    """One statement: copy the search's client into a new event, unless the same (search, row,
    kind) is stored already; answers whether the search is still in the log."""
    connection = connections[database]
    quote = connection.ops.quote_name
    log, event = SearchLog._meta, SearchEvent._meta
    # Typed (a server-side bound parameter is not taken for text); text, not varchar(n), so an
    # overlong value is refused by the column instead of cut by the cast.
    given = {"object_pk": "text", "position": "integer", "kind": "text", "dwell_ms": "integer"}
    columns = ", ".join(
        quote(event.get_field(name).column) for name in ("search", *given, "client", "created_at")
    )
    values = ", ".join(f"%s::{cast}" for cast in given.values())
    return (
        f"WITH found AS (SELECT {quote(log.pk.column)} AS search, "
        f"{quote(log.get_field('client').column)} AS client "
        f"FROM {quote(log.db_table)} WHERE {quote(log.pk.column)} = %s), "
        f"stored AS (INSERT INTO {quote(event.db_table)} ({columns}) "
        f"SELECT search, {values}, client, %s::timestamptz FROM found ON CONFLICT DO NOTHING) "
        "SELECT count(*) FROM found"
    )
