"""Admin building blocks: actions that answer 403, the admin's own pages (their URLs, their
context, whose rows a user may view), and ``EmbeddingAdminMixin`` for your models.

``django_sbert.admin`` re-exports ``EmbeddingAdminMixin``; import it from there.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite, ModelAdmin
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from ..exceptions import RunConflict, ServiceUnavailable, UnversionedVector
from ..finetuning import runs
from ..finetuning.errors import may_see_traceback
from ..finetuning.options import adapt_hyperparameters
from ..finetuning.pairs import content_pairs
from ..indexing import field_refs
from ..indexing.passages import passage_rows
from ..indexing.tasks import enqueue_embed
from ..query import as_semantic


class ForbidMissingActionsMixin:
    """A POSTed action the user may not run is a 403, not a silent "No action selected"."""

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if request.method == "POST" and request.POST.get("action"):
            name = request.POST["action"]
            declared = {a if isinstance(a, str) else a.__name__ for a in (self.actions or [])}
            if name in declared and name not in self.get_actions(request):
                raise PermissionDenied(f"You may not run the action {name!r}.")
        return super().changelist_view(request, extra_context)


def require_permission(request: HttpRequest, permission: str) -> None:
    """Raise ``PermissionDenied`` (403) unless the request's user has ``permission``."""
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"You need the {permission!r} permission.")


def page_urls(model_admin: ModelAdmin, *pages: tuple[str, Any, str]) -> list[URLPattern]:
    """The URLs of ``model_admin``'s own pages, one per (route, view, name), each behind the
    admin's login (``admin_view``)."""
    wrap = model_admin.admin_site.admin_view
    return [path(route, wrap(view), name=name) for route, view, name in pages]


def render_page(
    model_admin: ModelAdmin, request: HttpRequest, template: str, title: str, **context: Any
) -> TemplateResponse:
    """One of ``model_admin``'s own pages: ``django_sbert/admin/<template>`` with the admin
    site's context, the model's options (breadcrumbs) and ``title``."""
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        **context,
    }
    return TemplateResponse(request, f"django_sbert/admin/{template}", context)


def viewing_admin(admin_site: AdminSite, request: HttpRequest, model: Any) -> ModelAdmin | None:
    """``model``'s ModelAdmin on ``admin_site`` when ``request.user`` may view its rows there:
    its ``get_queryset(request)`` is what that user may see."""
    model_admin = admin_site._registry.get(model)
    if model_admin is None or not model_admin.has_view_permission(request):
        return None
    return model_admin


class StoredErrorAdminMixin:
    """Shows the stored error ``error_field`` (traceback included) to superusers, and to other
    staff its message only (the ``<name>_text`` display): a traceback shows the server's
    paths, settings and code."""

    error_field = "error"

    def _error_fields(self, request: HttpRequest, fields: Any) -> Any:
        if may_see_traceback(request.user):
            return fields
        return tuple(f"{field}_text" if field == self.error_field else field for field in fields)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self._error_fields(request, super().get_fields(request, obj))  # type: ignore[misc]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_readonly_fields(request, obj)  # type: ignore[misc]
        return self._error_fields(request, fields)


class SemanticChangeList(ChangeList):
    """Keeps the similarity order of a semantic search instead of the admin's ordering."""

    def get_ordering(self, request: HttpRequest, queryset: Any) -> list[Any]:
        if getattr(queryset, "_search", None) is not None and self.query:
            return [*queryset.query.order_by, "-pk"]
        return super().get_ordering(request, queryset)

    def get_results(self, request: HttpRequest) -> None:
        """A search that cannot run now (over STATEMENT_TIMEOUT, model files missing) shows
        an empty list and says why, instead of a server error."""
        try:
            super().get_results(request)
        except ServiceUnavailable as exc:
            messages.error(request, f"Semantic search is unavailable: {exc}")
            self.queryset = self.queryset.none()
            super().get_results(request)


class EmbeddingAdminMixin:
    """Add to the ``ModelAdmin`` of a model with an ``EmbeddingField`` and a SemanticManager::

        @admin.register(Article)
        class ArticleAdmin(EmbeddingAdminMixin, admin.ModelAdmin):
            ...

    * action "Re-embed selected" (needs the change permission);
    * the changelist search box ranks rows by similarity to the text typed (rows without a
      vector yet are left out); set ``semantic_search = False`` for Django's own search;
    * the change page lists the ``similar_items`` most similar rows among those
      ``get_queryset(request)`` lets the user see (any manager: the queryset is made semantic),
      and, for a field with ``passages=``, the row's passages with their offsets (their text
      only when the page shows every source field of the field).
    """

    semantic_search = True
    # ("title", "body"): adds "Make training pairs from selected" (title <-> body positives).
    sbert_pair_fields: tuple[str, str] | None = None
    search_help_text = "Results are ranked by meaning: type a question or a description."
    similar_items = 5
    embedding_field: str | None = None  # which EmbeddingField, when the model has several
    change_form_template = "django_sbert/admin/embedding_change_form.html"

    def _sbert_actions(self, request: HttpRequest) -> dict[str, bool]:
        """The mixin's actions and whether ``request.user`` may run each."""
        user = request.user
        return {
            "reembed_selected": self.has_change_permission(request),
            "make_training_pairs": self.sbert_pair_fields is not None
            and user.has_perm("django_sbert.add_trainingpair"),
            "adapt_encoder": user.has_perm("django_sbert.add_trainingrun"),
        }

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict:
        # Django 6.1 asks for the actions of one place (action_location: the change list or
        # the change form) and warns about an override without the argument; 5.2 has none.
        where = {} if action_location is None else {"action_location": action_location}
        actions = super().get_actions(request, **where)
        for name, allowed in self._sbert_actions(request).items():
            # get_action(): the entry in the form this Django wants (a tuple before 6.1, an
            # Action since), or None where the action does not show (the change form).
            if allowed and (action := self.get_action(name, **where)) is not None:
                actions[name] = action
        return actions

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        action = request.POST.get("action") if request.method == "POST" else None
        if action and self._sbert_actions(request).get(action) is False:
            raise PermissionDenied(f"You may not run the action {action!r}.")
        return super().changelist_view(request, extra_context)

    def make_training_pairs(self, request: HttpRequest, queryset: Any) -> None:
        field_a, field_b = self.sbert_pair_fields or ("", "")
        made = content_pairs(self.model, field_a, field_b, queryset=queryset.order_by("pk"))
        self.message_user(
            request, f"Created {made} training pairs ({field_a} <-> {field_b}).", messages.SUCCESS
        )

    make_training_pairs.short_description = "Make training pairs from selected"  # type: ignore[attr-defined]

    def adapt_encoder(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        """Queue a run on the text of every row of this model ("adapt to our content"), with
        the content recipe (``finetuning.options.ADAPT_LOSS``: pseudo-queries cut from the
        text)."""
        refs = field_refs(self.model)
        ref = next((r for r in refs if r.name == self.embedding_field), refs[0] if refs else None)
        if ref is None:
            self.message_user(request, "This model has no EmbeddingField.", messages.ERROR)
            return None
        try:
            run = runs.create_run(
                ref.encoder_name,
                hyperparameters=adapt_hyperparameters(),
                content=f"{ref.label}.{ref.name}",
                user=request.user,
            )
        except (ValidationError, RunConflict, ServiceUnavailable) as exc:
            self.message_user(
                request, " ".join(getattr(exc, "messages", [str(exc)])), messages.ERROR
            )
            return None
        return HttpResponseRedirect(reverse("admin:django_sbert_trainingrun_change", args=[run.pk]))

    adapt_encoder.short_description = "Adapt the encoder to this content (all rows' text)"  # type: ignore[attr-defined]

    def reembed_selected(self, request: HttpRequest, queryset: Any) -> None:
        pks = list(queryset.values_list("pk", flat=True))
        for ref in field_refs(self.model):
            enqueue_embed(ref, pks, force=True)
        self.message_user(request, f"Queued {len(pks)} row(s) for re-embedding.")

    reembed_selected.short_description = "Re-embed selected"  # type: ignore[attr-defined]

    def get_search_fields(self, request: HttpRequest) -> Any:
        fields = super().get_search_fields(request)
        # The admin shows its search box only when there are search fields.
        return fields or (("pk",) if self.semantic_search else fields)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return SemanticChangeList if self.semantic_search else super().get_changelist(request)

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        term = (search_term or "").strip()
        if not self.semantic_search or not term or not hasattr(queryset, "similar_to"):
            return super().get_search_results(request, queryset, search_term)
        try:
            return queryset.similar_to(term, field=self.embedding_field), False
        except ServiceUnavailable as exc:  # e.g. the serving version's files are not here
            messages.error(request, f"Semantic search is unavailable: {exc}")
            return queryset.none(), False

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        extra_context = dict(extra_context or {})
        obj = self.get_object(request, object_id)
        similar: list[Any] = []
        if obj is not None and self.similar_items:
            # The rows this user may see on this admin, never the whole table.
            queryset = as_semantic(self.get_queryset(request))
            try:
                similar = list(
                    queryset.similar_to(obj, k=self.similar_items, field=self.embedding_field)
                )
            except UnversionedVector as exc:  # nothing would keep it to one version's rows
                messages.warning(request, f"Similar items are unavailable: {exc}")
                similar = []
            except ValueError:  # no vector yet
                similar = []
            except ServiceUnavailable as exc:  # e.g. over SBERT["SEARCH"]["STATEMENT_TIMEOUT"]
                messages.warning(request, f"Similar items are unavailable: {exc}")
                similar = []
        extra_context["sbert_similar"] = [
            (
                item,
                reverse(
                    f"admin:{self.model._meta.app_label}_{self.model._meta.model_name}_change",
                    args=[item.pk],
                ),
            )
            for item in similar
        ]
        if obj is not None:  # fields with passages=: how the row's text was split
            shown = set(flatten_fieldsets(self.get_fieldsets(request, obj)))
            extra_context["sbert_passages"] = [
                self._passages_table(ref, obj, shown)
                for ref in field_refs(self.model)
                if ref.field.has_passages
            ]
        return super().change_view(request, object_id, form_url, extra_context)

    @staticmethod
    def _passages_table(ref: Any, obj: Any, shown: set[str]) -> tuple[str, list[dict], bool]:
        """(field name, passages, whether their text is shown). A passage is text of the
        field's source, so its text is shown only when this page shows every source field
        (a field this ModelAdmin leaves out, or a callable source, keeps it hidden)."""
        sources = ref.field.source_fields
        text_shown = sources is not None and set(sources) <= shown
        rows = passage_rows(ref, obj.pk)
        if not text_shown:
            rows = [{**row, "text": ""} for row in rows]
        return ref.name, rows, text_shown
