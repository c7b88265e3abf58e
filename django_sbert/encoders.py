"""Former home of the per-process encoder cache; it lives in ``django_sbert.serving`` now.

Kept so that existing imports (``from django_sbert.encoders import encode_query``) work.
"""

from __future__ import annotations

from .serving import *  # noqa: F403
from .serving import __all__  # noqa: F401
