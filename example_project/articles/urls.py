from django.urls import path

from django_sbert.views import SuggestView

from . import views
from .models import Article

app_name = "articles"

urlpatterns = [
    path("", views.ArticleSearch.as_view(), name="search"),
    path("articles/<int:pk>/", views.article_page, name="detail"),
    # Search-as-you-type for the search box (django_sbert/suggest.js): title, link, category.
    path("suggest/", SuggestView.as_view(model=Article, fields=["category"]), name="suggest"),
]
