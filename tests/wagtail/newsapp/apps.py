from django.apps import AppConfig


class NewsAppConfig(AppConfig):
    name = "tests.wagtail.newsapp"
    label = "sbert_wagtail_news"
    default_auto_field = "django.db.models.BigAutoField"
