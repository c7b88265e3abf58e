from django.urls import path

from . import views

app_name = "articles"

urlpatterns = [
    path("", views.search_page, name="search"),
    path("articles/<int:pk>/", views.article_page, name="detail"),
]
