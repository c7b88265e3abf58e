"""Permission classes for the sbert API.

search/ and similar/ use the classes a model was registered with (``register(...,
permission_classes=[...])``), else SBERT["API"]["PERMISSION_CLASSES"]["search"], else the
project's REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]. embed/ uses
SBERT["API"]["PERMISSION_CLASSES"]["embed"] (authenticated users by default: encoding costs CPU
and the encoder is the site's own).
"""

from __future__ import annotations

from rest_framework.permissions import DjangoModelPermissions


class DjangoModelViewPermissions(DjangoModelPermissions):
    """DjangoModelPermissions that also guards reads: GET needs ``<app>.view_<model>``.

    DRF's DjangoModelPermissions lets any authenticated user read; searching a model is a read,
    so this asks for the view permission, which staff get only when it is granted to them (or
    to their group) and superusers always have.
    """

    perms_map = {
        **DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
        "OPTIONS": ["%(app_label)s.view_%(model_name)s"],
    }
