from django.apps import AppConfig


class ScaleappConfig(AppConfig):
    name = "tests.scaleapp"
    label = "scaleapp"
    default_auto_field = "django.db.models.BigAutoField"
