"""Click tokens: a signed (search, row, position) per logged result.

A token is ``"<search id>:<position>:<row pk>"`` signed by ``django.core.signing``'s
``TimestampSigner`` with a salt of its own, so a click can only be reported for the search, row
and position the page showed, and only within ``TOKEN_MAX_AGE`` seconds. An
edited token, or one signed with another key, is refused. Plain text rather than
``signing.dumps()``'s JSON: a page of ten results signs ten tokens, and this costs half as much.
Tokens of ``signing.dumps()``'s form (issued by 0.2.0) are still read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.core import signing

from ..exceptions import InvalidToken

SALT = "django_sbert.feedback.click"
TOKEN_MAX_AGE = 86400  # seconds a result's click token stays valid after the search


@dataclass(frozen=True)
class ClickTarget:
    """What a token names: a logged search, one of its rows, and the position it was shown at."""

    search_id: uuid.UUID
    object_pk: str
    position: int


def _signer() -> signing.TimestampSigner:
    return signing.TimestampSigner(salt=SALT)  # reads SECRET_KEY now, not at import


def make_token(search_id: uuid.UUID, object_pk: Any, position: int) -> str:
    """The token of the result at ``position`` (from 1) of search ``search_id``."""
    return _signer().sign(f"{search_id.hex}:{int(position)}:{object_pk}")


def read_token(token: str) -> ClickTarget:
    """The search, row and position ``token`` names; ``InvalidToken`` when it cannot be
    trusted."""
    try:
        max_age = TOKEN_MAX_AGE
        value = _signer().unsign(str(token), max_age=max_age)
        if ":" in value:
            fields: Any = value.split(":", 2)
        else:  # signing.dumps()'s base64 JSON, signed the same way: [search, pk, position]
            old = signing.loads(str(token), salt=SALT, max_age=max_age)
            fields = [old[0], old[2], old[1]] if isinstance(old, list) and len(old) == 3 else ()
    except signing.SignatureExpired:
        raise InvalidToken(
            "This click token has expired; tokens are valid for "
            f"{TOKEN_MAX_AGE} seconds after the search."
        ) from None
    except signing.BadSignature:
        raise InvalidToken(
            "This click token is not valid: it was changed, or not issued by this site. Send "
            "the click_token of a search result as it was given."
        ) from None
    try:
        search, position, pk = fields
        return ClickTarget(uuid.UUID(hex=search), str(pk), int(position))
    except (TypeError, ValueError):  # signed by this site, but not a click token's shape
        raise InvalidToken("This is not a click token.") from None


def issued_within(token: str, seconds: float) -> bool:
    """Whether ``token`` (a valid one) was signed less than ``seconds`` ago."""
    try:
        _signer().unsign(str(token), max_age=seconds)
    except signing.BadSignature:  # SignatureExpired included
        return False
    return True
