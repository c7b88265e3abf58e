"""``uvicorn tests.asgi_app.warm_asgi:application``: the ASGI test site wrapped as
docs/deployment.md shows, so each worker process warms its encoders at the lifespan start-up."""

import os

from django.core.asgi import get_asgi_application

from django_sbert.contrib.asgi import warm_on_startup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.asgi_app.warm_settings")
application = warm_on_startup(get_asgi_application())
