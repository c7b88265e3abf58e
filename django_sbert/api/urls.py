"""URLs of the sbert API.

Mount them with ``path("api/sbert/", include("django_sbert.api.urls"))``.
"""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from .evaluations import EvaluationView
from .finetuning import EncoderVersionViewSet, TrainingPairViewSet, TrainingRunViewSet
from .schema import SchemaView
from .views import EmbedView, EventView, SearchAPIView, SimilarView, SuggestAPIView

app_name = "sbert-api"

# The fine-tuning workflow, for staff with the matching model permissions (docs/api.md).
training = SimpleRouter()
training.register("pairs", TrainingPairViewSet, basename="pair")
training.register("training-runs", TrainingRunViewSet, basename="training-run")
training.register("encoder-versions", EncoderVersionViewSet, basename="encoder-version")

urlpatterns = [
    path("search/", SearchAPIView.as_view(), name="search"),
    path("similar/<str:model>/<str:pk>/", SimilarView.as_view(), name="similar"),
    path("suggest/<str:model>/", SuggestAPIView.as_view(), name="suggest"),
    path("embed/", EmbedView.as_view(), name="embed"),
    # Clicks and conversions on logged search results (docs/learning.md).
    path("events/", EventView.as_view(), name="events"),
    path("schema/", SchemaView.as_view(), name="schema"),
    # Search quality on judgment lists, for staff (docs/api.md).
    path("evaluations/", EvaluationView.as_view(), name="evaluations"),
    path("", include(training.urls)),
]
