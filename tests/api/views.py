"""A user's own viewset, gaining ?semantic= through SemanticSearchFilter."""

from __future__ import annotations

from rest_framework import filters, serializers, viewsets
from rest_framework.pagination import PageNumberPagination

from django_sbert.api.filters import SemanticSearchFilter
from tests.testapp.models import Article


class ArticleSerializer(serializers.ModelSerializer):
    similarity = serializers.FloatField(read_only=True, required=False)

    class Meta:
        model = Article
        fields = ["id", "title", "category", "similarity"]


class CategoryFilter(filters.BaseFilterBackend):
    """?category=...: stands in for django-filter's backend."""

    def filter_queryset(self, request, queryset, view):
        category = request.query_params.get("category")
        return queryset.filter(category=category) if category else queryset


class TwoPerPage(PageNumberPagination):
    page_size = 2


class ArticleViewSet(viewsets.ModelViewSet):
    queryset = Article.objects.all()
    serializer_class = ArticleSerializer
    pagination_class = TwoPerPage
    filter_backends = [
        CategoryFilter,
        filters.SearchFilter,
        filters.OrderingFilter,
        SemanticSearchFilter,
    ]
    search_fields = ["title", "body"]
    ordering_fields = ["title", "id"]
    ordering = ["id"]


class UnpaginatedArticleViewSet(ArticleViewSet):
    pagination_class = None
    semantic_search_k = 3
