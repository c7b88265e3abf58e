"""The ASGI application uvicorn serves: ``uvicorn tests.asgi_app.asgi:application``."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.asgi_app.settings")
application = get_asgi_application()
