"""The package's models: fine-tuning bookkeeping, skipped rows, the search log, judgment lists.

Fine-tuning: ``TrainingPair``, ``TrainingRun``, ``EncoderVersion`` (at most one ``active`` per
encoder; with none the settings' model serves), ``PromotionRecord`` (the history rollback
follows), ``BaseVersion``, and ``StagedEmbedding`` / ``StagedPassage`` (vectors of a version
that is not serving: a candidate's while promoted, the previous one's after a switch).
Indexing: ``SkippedRow``. Feedback: ``SearchLog``, ``SearchEvent``, ``PairEvidence``.
Evaluation: ``JudgmentList``, ``JudgedQuery``, ``Judgment``, ``Evaluation``. Each model's
docstring says what one row is.

See docs/fine-tuning.md for the workflow and how promotion stays consistent.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import VectorField

SPLITS = [("train", "train"), ("eval", "eval")]
BEHAVIOUR_SOURCE = "events:"  # TrainingPair.source of the pairs made from visitors' clicks


class TrainingPair(models.Model):
    """Two texts that should be close (or are scored / labelled) for the encoder to learn."""

    text_a = models.TextField(help_text="Anchor, query or first sentence.")
    text_b = models.TextField(help_text="Positive, document or second sentence.")
    text_negative = models.TextField(
        blank=True, default="", help_text="Optional hard negative for text_a."
    )
    score = models.FloatField(
        null=True, blank=True, help_text="Similarity in [0, 1]; empty for positive pairs."
    )
    label = models.CharField(
        max_length=50, blank=True, default="", help_text="e.g. entailment / neutral / contradiction"
    )
    split = models.CharField(max_length=10, choices=SPLITS, default="train", db_index=True)
    source = models.CharField(max_length=200, blank=True, default="", db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(score__isnull=True) | Q(score__gte=0, score__lte=1),
                name="sbert_pair_score_0_1",
            )
        ]

    def __str__(self) -> str:
        return f"{self.text_a[:40]} / {self.text_b[:40]}"

    @property
    def kind(self) -> str:
        """``"scored"``, ``"labelled"``, ``"triplet"`` or ``"positive"``."""
        if self.score is not None:
            return "scored"
        if self.label:
            return "labelled"
        if self.text_negative:
            return "triplet"
        return "positive"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


class TrainingRun(models.Model):
    """One fine-tuning job of one encoder, from queued to succeeded / failed / cancelled."""

    encoder_name = models.CharField(max_length=100, default="default")
    base_version = models.CharField(
        max_length=100, blank=True, default="", help_text="Version that was serving at start."
    )
    loss = models.CharField(max_length=30)
    hyperparameters = models.JSONField(default=dict, blank=True)
    # What it trains on: a list of TrainingPair ids, or {"content": "app.Model.field"}.
    data = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    loss_history = models.JSONField(default=list, blank=True)  # [[step, mean loss], ...]
    metrics_before = models.JSONField(default=dict, blank=True)
    metrics_after = models.JSONField(default=dict, blank=True)
    # Early stopping on the eval split: {"metric", "history": [[step, value], ...], "best_step",
    # "best_metric", "steps", "total_steps", "stopped_early"}; empty without it.
    evaluations = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(null=True, blank=True)  # last progress write (heartbeat)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        ordering = ["-id"]
        constraints = [
            # At most one queued or running run per encoder, enforced by the database.
            models.UniqueConstraint(
                fields=["encoder_name"],
                condition=Q(status__in=["queued", "running"]),
                name="sbert_one_active_run_per_encoder",
            )
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} of {self.encoder_name!r} ({self.status})"

    @property
    def progress(self) -> float:
        """Share of the steps done, in [0, 1]."""
        if self.status == RunStatus.SUCCEEDED:
            return 1.0
        return self.step / self.total_steps if self.total_steps else 0.0

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_RUN_STATUSES


class VersionStatus(models.TextChoices):
    CANDIDATE = "candidate"
    PROMOTING = "promoting"  # its vectors are being staged; it serves nothing yet
    ACTIVE = "active"
    RETIRED = "retired"


class EncoderVersion(models.Model):
    """A saved model of one encoder: a fine-tuned candidate, the active one, or a retired one.

    ``is_base`` rows stand for the model named in settings; one is created the first time a
    version replaces it, so that rollback can return to it like to any other version.
    """

    encoder_name = models.CharField(max_length=100, default="default")
    version = models.CharField(
        max_length=100, unique=True, help_text="What <field>_version stores for its vectors."
    )
    directory = models.CharField(
        max_length=500, blank=True, default="", help_text="Saved model; empty for the base model."
    )
    is_base = models.BooleanField(default=False)
    parent = models.CharField(max_length=100, blank=True, default="")
    run = models.OneToOneField(
        TrainingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="candidate"
    )
    metrics = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=10, choices=VersionStatus.choices, default=VersionStatus.CANDIDATE
    )
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    replaced = models.CharField(
        max_length=100, blank=True, default="", help_text="Version active before this one."
    )
    # Promotion progress: rows whose vectors are staged for this version / rows to stage.
    staged_rows = models.PositiveIntegerField(default=0)
    total_rows = models.PositiveIntegerField(default=0)
    promotion_error = models.TextField(blank=True, default="")
    promotion_updated_at = models.DateTimeField(null=True, blank=True)
    # The promotion under way (or last asked): {"kind": "promotion" | "rollback", "by": user
    # pk, "by_name", "reason", "forced", "gate": "pending" | "running" | "passed" | "refused" |
    # "not evaluated" | "skipped", "gate_detail", "gate_step": [done, total], "undoes": the
    # PromotionRecord pk a rollback undoes, "attempts": how often a worker started it}.
    promotion_request = models.JSONField(default=dict, blank=True)
    # sha256 of the version's manifest.json, recorded when the row is saved: hosts refuse a
    # manifest that differs (serving/storage.py). Empty for the base model and old versions.
    manifest_sha256 = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["encoder_name", "status"], name="sbert_version_lookup")]
        constraints = [
            models.UniqueConstraint(
                fields=["encoder_name"],
                condition=Q(status="active"),
                name="sbert_one_active_version_per_encoder",
            ),
            models.UniqueConstraint(
                fields=["encoder_name"],
                condition=Q(status="promoting"),
                name="sbert_one_promotion_per_encoder",
            ),
        ]

    def __str__(self) -> str:
        return self.version

    @property
    def promotion_progress(self) -> float:
        return self.staged_rows / self.total_rows if self.total_rows else 0.0


class PromotionKind(models.TextChoices):
    PROMOTION = "promotion"
    ROLLBACK = "rollback"


class PromotionRecord(models.Model):
    """One switch of an encoder's serving version: from, to, who, when, why, and how it passed
    the evaluation gate (or that it was forced past it). Rollback follows this history: it
    returns to the version active before the current one was promoted, never forward."""

    encoder_name = models.CharField(max_length=100)
    from_version = models.CharField(max_length=100)
    to_version = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=PromotionKind.choices)
    forced = models.BooleanField(default=False, help_text="Promoted past a refusing gate.")
    gate = models.TextField(blank=True, default="", help_text="The gate's verdict, if asked.")
    reason = models.TextField(blank=True, default="")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150, blank=True, default="")  # kept if user goes
    created_at = models.DateTimeField(auto_now_add=True)
    # The rollback that undid this promotion (a later rollback then goes further back).
    undone_by = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="undoes"
    )

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["encoder_name", "to_version"], name="sbert_promo_to")]

    def __str__(self) -> str:
        return f"{self.encoder_name}: {self.from_version} -> {self.to_version} ({self.kind})"


class BaseVersion(models.Model):
    """The settings' model of one encoder as it first served: every host serves this version
    string, and a host whose copy of the model differs refuses (``serving/identity.py``)."""

    encoder_name = models.CharField(max_length=100)
    label = models.CharField(max_length=60, help_text="The model's name, e.g. all-MiniLM-L6-v2.")
    # sha256 of the first host's files, from which the version string is built (with the
    # DOCUMENT_PROMPT setting, when one is set).
    fingerprint = models.CharField(max_length=64)
    # sha256 of the files the encoder reads: what every other host's copy must match.
    files = models.CharField(max_length=64)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["encoder_name", "label"], name="sbert_base_version")
        ]

    def __str__(self) -> str:
        return f"{self.encoder_name}: {self.label}:{self.fingerprint[:16]}"


class StagedEmbedding(models.Model):
    """One row's vector for one field under a version that is not (yet, or any more) serving."""

    content_type = models.ForeignKey(ContentType, on_delete=models.CASCADE)
    object_pk = models.CharField(max_length=255)
    field = models.CharField(max_length=100)
    version = models.CharField(max_length=100)
    vector = VectorField()  # no fixed size: encoders of any width share this table
    text_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["content_type", "field", "version", "object_pk"],
                name="sbert_staged_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.content_type_id}:{self.object_pk}.{self.field}@{self.version}"


class StagedPassage(models.Model):
    """One passage of one row for a field with ``passages=`` under a version that is not (yet,
    or any more) serving: staged and switched together with the row's ``StagedEmbedding``."""

    content_type = models.ForeignKey(ContentType, on_delete=models.CASCADE)
    object_pk = models.CharField(max_length=255)
    field = models.CharField(max_length=100)
    version = models.CharField(max_length=100)
    ordinal = models.PositiveIntegerField()
    start = models.PositiveIntegerField()
    end = models.PositiveIntegerField()
    text = models.TextField()
    vector = VectorField()  # no fixed size, like StagedEmbedding's

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["content_type", "field", "version", "object_pk", "ordinal"],
                name="sbert_staged_passage_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.content_type_id}:{self.object_pk}.{self.field}@{self.version}#{self.ordinal}"


class SkipStage(models.TextChoices):
    SOURCE = "source"  # building the row's text raised
    WRITE = "write"  # the database refused the row's vector
    STAGE = "stage"  # the database refused the row's vector for a version being promoted


class SkippedRow(models.Model):
    """A row of one EmbeddingField that indexing skipped after an error of its own.

    Written by ``indexing.failures.record`` and removed when the row is next embedded (or
    checked up to date, or deleted). The sweep leaves a row alone while its text hash and the
    serving version are those recorded, until ``retry_after``; an edit sends it at once.
    """

    content_type = models.ForeignKey(ContentType, on_delete=models.CASCADE)
    object_pk = models.TextField()  # str(pk): the same text as pk::text in SQL
    field = models.CharField(max_length=100)
    stage = models.CharField(max_length=10, choices=SkipStage.choices)
    text_hash = models.CharField(max_length=64, blank=True, default="")  # "": text unreadable
    version = models.CharField(max_length=100)  # the version it was being encoded with
    error = models.CharField(max_length=200)  # the exception's class, e.g. "DataError"
    message = models.TextField(blank=True, default="")
    failures = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    retry_after = models.DateTimeField()

    class Meta:
        ordering = ["-last_seen"]
        constraints = [
            models.UniqueConstraint(
                fields=["content_type", "field", "object_pk"], name="sbert_skipped_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.content_type_id}:{self.object_pk}.{self.field} ({self.error})"


class JudgmentList(models.Model):
    """A named set of graded queries over the rows of one model's EmbeddingField."""

    name = models.CharField(max_length=200, unique=True)
    content_type = models.ForeignKey(
        ContentType, on_delete=models.CASCADE, help_text="The model whose rows are graded."
    )
    field = models.CharField(max_length=100, help_text="Its EmbeddingField's name.")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class JudgedQuery(models.Model):
    """One query of a judgment list; its graded rows are its ``judgments``."""

    judgment_list = models.ForeignKey(
        JudgmentList, related_name="queries", on_delete=models.CASCADE
    )
    text = models.TextField()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "judged queries"
        constraints = [
            models.UniqueConstraint(
                fields=["judgment_list", "text"], name="sbert_judged_query_unique"
            )
        ]

    def __str__(self) -> str:
        return self.text[:80]


class Judgment(models.Model):
    """How relevant one row is to one query: 0 not relevant, 1 somewhat, 2 relevant, 3 perfect."""

    query = models.ForeignKey(JudgedQuery, related_name="judgments", on_delete=models.CASCADE)
    object_pk = models.CharField(max_length=255, help_text="The graded row's pk, as text.")
    grade = models.PositiveSmallIntegerField(
        help_text="0 not relevant, 1 somewhat, 2 relevant, 3 perfect."
    )

    class Meta:
        ordering = ["query", "-grade", "object_pk"]
        constraints = [
            models.UniqueConstraint(fields=["query", "object_pk"], name="sbert_judgment_unique"),
            models.CheckConstraint(
                condition=Q(grade__gte=0, grade__lte=3), name="sbert_judgment_grade_0_3"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.object_pk}: {self.grade}"


class Evaluation(models.Model):
    """One measurement of a judgment list with one encoder version and search mode."""

    judgment_list = models.ForeignKey(
        JudgmentList, related_name="evaluations", on_delete=models.CASCADE
    )
    version = models.CharField(max_length=200, help_text="The encoder version measured.")
    mode = models.CharField(max_length=20, help_text="vector, keyword, hybrid or passages.")
    metrics = models.JSONField(help_text="The metrics by name, the query count and the threshold.")
    trigger = models.CharField(max_length=20, help_text="manual, promotion or schedule.")
    seconds = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.judgment_list} {self.version} {self.mode}"


def pair_kind_counts(pairs: models.QuerySet[TrainingPair]) -> dict[str, Any]:
    """How many pairs of each shape ``pairs`` holds (picks the default loss)."""
    return pairs.aggregate(
        total=models.Count("pk"),
        scored=models.Count("pk", filter=Q(score__isnull=False)),
        labelled=models.Count("pk", filter=Q(score__isnull=True) & ~Q(label="")),
        triplets=models.Count("pk", filter=Q(score__isnull=True, label="") & ~Q(text_negative="")),
        train=models.Count("pk", filter=Q(split="train")),
        eval=models.Count("pk", filter=Q(split="eval")),
    )


class SearchLog(models.Model):
    """One logged search: what was asked, how, by which encoder version, and its first page.

    One insert per search: the results shown are a JSON list ``[[pk, position, score], ...]``
    (positions from 1), not rows of their own. ``client`` is a keyed hash of the session or
    user, never an IP address; ``query`` is capped at ``feedback.log.MAX_QUERY_LENGTH``.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    query = models.TextField()
    # lower-cased, whitespace-collapsed: what analytics group by and pairs are merged on
    normalized = models.TextField(db_index=True)
    mode = models.CharField(max_length=10, help_text="vector, keyword, hybrid or passages.")
    model_label = models.CharField(max_length=200, help_text='"app_label.ModelName".')
    field = models.CharField(max_length=100, blank=True, default="")
    filters_digest = models.CharField(max_length=64, blank=True, default="")
    encoder_name = models.CharField(max_length=100, default="default")
    version = models.CharField(max_length=100, blank=True, default="")
    results = models.JSONField(default=list, blank=True)
    result_count = models.PositiveIntegerField(default=0)
    client = models.CharField(max_length=64, db_index=True)
    # A keyed hash of the searcher's network (IPv4 /24, IPv6 /48), never the address: what
    # the loop counts as one visitor (feedback.visitors.network_key).
    network = models.CharField(max_length=32, blank=True, default="", db_index=True)
    latency_ms = models.FloatField(null=True, blank=True)
    # "keyword": the search asked for mode's vectors but the encoder was away (the host's
    # query server, in the light layout), so its results came from the keyword side.
    degraded = models.CharField(
        max_length=10,
        blank=True,
        default="",
        help_text='"keyword": answered from the keyword side, the encoder being away.',
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["model_label", "created_at"], name="sbert_log_model")]

    def __str__(self) -> str:
        return f"{self.query[:60]} ({self.mode}, {self.created_at:%Y-%m-%d %H:%M})"


class SearchEvent(models.Model):
    """What a visitor did with one result of a logged search: a click or a conversion.

    At most one per (search, row, kind): a second report of the same click changes nothing.
    """

    search = models.ForeignKey(SearchLog, related_name="events", on_delete=models.CASCADE)
    object_pk = models.CharField(max_length=255)
    position = models.PositiveIntegerField(help_text="The result's position, from 1.")
    kind = models.CharField(max_length=40, help_text='"click" or a configured conversion.')
    dwell_ms = models.PositiveIntegerField(null=True, blank=True)
    client = models.CharField(max_length=64, db_index=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["search", "object_pk", "kind"], name="sbert_event_once")
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.object_pk} at {self.position}"


class PairEvidence(models.Model):
    """One visitor's clicks behind a pair from behaviour (``TrainingPair.source`` "events:...").

    A visitor is a client key (``SearchLog.client``) on a network (``SearchLog.network``), both
    keyed hashes. Forgetting a client deletes the pairs it made; the purge deletes the pairs
    whose every click is past retention.
    """

    pair = models.ForeignKey(TrainingPair, related_name="evidence", on_delete=models.CASCADE)
    object_pk = models.CharField(max_length=255, help_text="The clicked row's pk, as text.")
    client = models.CharField(max_length=64, db_index=True)
    network = models.CharField(max_length=32, blank=True, default="", db_index=True)
    position = models.PositiveIntegerField(help_text="The best position it was clicked at.")
    clicked_at = models.DateTimeField(db_index=True, help_text="Its latest click.")

    class Meta:
        ordering = ["pair", "clicked_at"]

    def __str__(self) -> str:
        return f"pair {self.pair_id}: clicked at {self.position}"
