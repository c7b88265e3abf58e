from django.urls import path

from . import views

app_name = "articles"

urlpatterns = [
    path("", views.ArticleSearch.as_view(), name="search"),
    path("articles/<int:pk>/", views.article_page, name="detail"),
]
