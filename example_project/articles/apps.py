from django.apps import AppConfig


class ArticlesConfig(AppConfig):
    name = "articles"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The REST API searches only registered models and returns only the listed fields. The
        # articles are public, so results may show their best passage (a piece of the body).
        from django_sbert import api

        from .models import Article

        api.register(Article, fields=["id", "title", "category", "published", "url"], passages=True)
