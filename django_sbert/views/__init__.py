"""Django views of django-sbert that are not part of the REST API.

Modules:

* ``health``: the readiness of this process, for a load balancer or an orchestrator.

``from django_sbert.views import health`` keeps working: the names are re-exported here.
"""

from __future__ import annotations

from .health import health

__all__ = ["health"]
