"""Promote a version of an encoder (or roll back) without a moment of inconsistent search.

1. ``start_promotion`` checks the evaluation gate where that needs no encoding
   (``gate.stored_verdict``), marks the version ``promoting`` (one per encoder, enforced by a
   partial unique constraint) with who asked and why (``EncoderVersion.promotion_request``)
   and queues ``run_promotion``; a gate that must encode both versions runs first thing in
   that task, never in the web request.
2. ``run_promotion`` *stages* the version's vectors of every row of every EmbeddingField using
   the encoder in ``StagedEmbedding``, a side table, while every query keeps the serving
   version's vectors. It is resumable (rows already staged from their current text are
   skipped); rows saved meanwhile are staged by their own embedding task (``indexing.writes``).
3. ``switch`` then runs one transaction holding the encoder's switch lock: it keeps the
   serving version's vectors in the side table (for rollback), copies the staged vectors into
   the live columns with one ``UPDATE ... FROM`` per field, retires the old version and
   activates the new one, and records the switch (``PromotionRecord``: from, to, who, why,
   forced or gated). Before COMMIT every reader sees the old vectors and the old active
   version; after it, the new ones.

A promotion that fails for any reason (the gate refused it, the version's files cannot be
fetched, a database error) puts the version back (candidate, or retired when it served before)
with the error, in the one UPDATE that records it (``give_back``). ``rollback`` follows the
history: it returns to the version active before the current one was promoted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connections, router, transaction
from django.db.models import Case, Value, When
from django.utils import timezone

from ..conf import sbert_settings
from ..exceptions import BrokerUnavailable, PromotionRefused, RollbackForbidden
from ..indexing import FieldRef, field_refs
from ..indexing.rows import pages_by_pk
from ..indexing.writes import content_type_id, stage_pending, unstaged
from ..models import (
    EncoderVersion,
    PromotionKind,
    PromotionRecord,
    StagedEmbedding,
    VersionStatus,
)
from ..serving import forget_serving, serving_record, switch_lock
from .errors import describe_exception
from .gate import GateResult, stored_verdict
from .gate import gate as evaluation_gate  # start_promotion() has a `gate` flag
from .passages import switch_passages

logger = logging.getLogger(__name__)

STAGE_CHUNK_ROWS = 256


# --- which rows a promotion covers ----------------------------------------------------------


def fields_of(name: str) -> list[FieldRef]:
    """Every EmbeddingField (one per table) encoded by encoder ``name``."""
    return [ref for ref in field_refs() if ref.encoder_name == name]


# --- staging every row ---------------------------------------------------------------------


def stage_field(
    ref: FieldRef,
    version: str,
    *,
    chunk_rows: int = STAGE_CHUNK_ROWS,
    progress: Callable[[int], Any] | None = None,
) -> int:
    """Stage ``version`` vectors for every row of one field; returns how many were encoded.

    Walks the table in primary-key order (keyset), ``chunk_rows`` at a time; each chunk is
    committed on its own, so a killed worker keeps what it finished.
    """
    encoded = 0
    for pks in pages_by_pk(ref.manager.all(), chunk_rows):
        pending = unstaged(ref, pks, version)
        if pending:
            stage_pending(ref, pending, version)
            encoded += len(pending)
        if progress is not None:
            progress(len(pks))
    return encoded


# --- the switch -------------------------------------------------------------------------------


def _switch_field(ref: FieldRef, old: str, new: str) -> int:
    """Keep the live ``old`` vectors in the side table, then copy the staged ``new`` ones in."""
    connection = connections[ref.db_alias]
    quote = connection.ops.quote_name
    opts = ref.model._meta
    column = {f.attname: f.column for f in opts.concrete_fields}
    table = quote(opts.db_table)
    staged = quote(StagedEmbedding._meta.db_table)
    pk = f"{table}.{quote(opts.pk.column)}"
    vec = quote(column[ref.field.attname])
    hash_ = quote(column[ref.hash_attname])
    ver = quote(column[ref.version_attname])
    upd = quote(column[ref.updated_at_attname])
    vector_type = ref.field.db_type(connection)
    ct = content_type_id(ref)
    now = timezone.now()
    with connection.cursor() as cursor:
        # 1. The serving version's vectors, as they are now, become the rollback copy.
        cursor.execute(
            f"DELETE FROM {staged} WHERE content_type_id = %s AND field = %s AND version = %s",
            [ct, ref.name, old],
        )
        cursor.execute(
            f"INSERT INTO {staged} (content_type_id, object_pk, field, version, vector, "
            f"text_hash, created_at) SELECT %s, {pk}::text, %s, %s, {vec}::vector, {hash_}, %s "
            f"FROM {table} WHERE {vec} IS NOT NULL AND {hash_} IS NOT NULL AND {ver} = %s",
            [ct, ref.name, old, now, old],
        )
        # 2. The new version's staged vectors go live, with their passages (passages=).
        switch_passages(ref, old, new)
        cursor.execute(
            f"UPDATE {table} SET {vec} = s.vector::{vector_type}, {hash_} = s.text_hash, "
            f"{ver} = %s, {upd} = %s FROM {staged} s WHERE s.content_type_id = %s "
            f"AND s.field = %s AND s.version = %s AND s.object_pk = {pk}::text",
            [new, now, ct, ref.name, new],
        )
        switched = cursor.rowcount
        # 3. Only the previous version is kept: everything else staged for this field goes.
        cursor.execute(
            f"DELETE FROM {staged} WHERE content_type_id = %s AND field = %s AND version <> %s",
            [ct, ref.name, old],
        )
    return switched


def switch(target: EncoderVersion) -> dict[str, int]:
    """Make ``target`` serve, in one transaction; returns rows switched per field.

    Holds the encoder's switch lock exclusively, so no indexing write of the old version can
    commit after it (writers hold the lock shared and re-check the serving version).
    """
    name = target.encoder_name
    refs = fields_of(name)
    # The primary: where versions are written (a replica router's db_for_read may differ).
    aliases = {ref.db_alias for ref in refs} | {router.db_for_write(EncoderVersion)}
    if len(aliases) > 1:
        raise ImproperlyConfigured(
            f"Encoder {name!r} is used by tables on several databases ({sorted(aliases)}); "
            "a switch must be one transaction, so keep them on one database."
        )
    alias = aliases.pop()
    with transaction.atomic(using=alias):
        switch_lock(name, shared=False, using=alias)
        target = EncoderVersion.objects.select_for_update().get(pk=target.pk)
        if target.status != VersionStatus.PROMOTING:
            raise PromotionRefused(f"{target} is {target.status}, not being promoted.")
        old = serving_record(name, max_age=0, using=alias).version
        switched = {str(ref): _switch_field(ref, old, target.version) for ref in refs}
        previous = EncoderVersion.objects.select_for_update().filter(
            encoder_name=name, status=VersionStatus.ACTIVE
        )
        if not previous.exists():
            _keep_base_row(name, old)
        previous.update(status=VersionStatus.RETIRED)
        kind = _record_switch(target, old)
        target.status = VersionStatus.ACTIVE
        target.activated_at = timezone.now()
        if kind == PromotionKind.PROMOTION and old != target.version:
            target.replaced = old  # a rollback keeps what the version replaced when promoted
        target.promotion_error = ""
        target.promotion_updated_at = timezone.now()
        target.save()
        transaction.on_commit(lambda: forget_serving(name), using=alias)
    logger.info("Encoder %r now serves %s (was %s): %s", name, target.version, old, switched)
    return switched


def _record_switch(target: EncoderVersion, old: str) -> str:
    """Write the history row of the switch from ``old`` to ``target`` (inside ``switch``'s
    transaction); a rollback marks the promotion it undoes. Returns the kind of switch."""
    request = target.promotion_request or {}
    kind = request.get("kind") or PromotionKind.PROMOTION
    by = request.get("by")
    if by is not None and not get_user_model().objects.filter(pk=by).exists():
        by = None  # deleted meanwhile: the name stays
    record = PromotionRecord.objects.create(
        encoder_name=target.encoder_name,
        from_version=old,
        to_version=target.version,
        kind=kind,
        forced=bool(request.get("force")) and request.get("gate") != "passed",
        gate=request.get("gate_detail") or request.get("gate") or "",
        reason=request.get("reason") or "",
        user_id=by,
        username=request.get("by_name") or "",
    )
    if kind == PromotionKind.ROLLBACK and request.get("undoes"):
        PromotionRecord.objects.filter(pk=request["undoes"], undone_by__isnull=True).update(
            undone_by=record
        )
    return kind


def _keep_base_row(name: str, version: str) -> None:
    """The settings' model is leaving service for the first time: record it, so that rollback
    can return to it like to any other version."""
    EncoderVersion.objects.get_or_create(
        version=version,
        defaults={"encoder_name": name, "is_base": True, "status": VersionStatus.RETIRED},
    )


# --- the whole promotion ----------------------------------------------------------------------


def start_promotion(
    target: EncoderVersion,
    *,
    force: bool = False,
    gate: bool = True,
    run_now: bool = False,
    user: Any = None,
    reason: str = "",
    kind: str = PromotionKind.PROMOTION,
    undoes: int | None = None,
) -> GateResult | None:
    """Check the gate, mark ``target`` promoting and queue (or, with ``run_now``, run) the
    promotion. ``force`` promotes whatever the gate says, also a candidate it could not
    compare ("no evaluation: ..."); callers let only superusers pass it. ``user`` and
    ``reason`` go into the promotion history (``PromotionRecord``).

    The gate is asked here only where it needs no encoding (``gate.stored_verdict``); when both
    versions must be measured the verdict comes from the promotion task (None is returned, and
    ``promotion_request["gate"]`` is ``"pending"``), which gives the version back with the
    refusal as its ``promotion_error`` unless forced.

    Raises ``PromotionRefused`` with the reason (and the numbers) when it will not promote.
    """
    name = target.encoder_name
    if target.status == VersionStatus.ACTIVE:
        raise PromotionRefused(f"{target} is already the active version of {name!r}.")
    verdict = None
    gate_state = "skipped"
    if gate and target.status != VersionStatus.PROMOTING:
        verdict = stored_verdict(target)
        if verdict is None:
            gate_state = "pending"  # measured by the task: encoding is not for a web request
        else:
            _check_verdict(target, verdict, force)
            gate_state = _gate_state(verdict)
    if target.status != VersionStatus.PROMOTING:
        request = {
            "kind": str(kind),
            "by": getattr(user, "pk", None),
            "by_name": user.get_username() if user is not None else "",
            "reason": reason,
            "force": bool(force),
            "gate": gate_state,
            "gate_detail": verdict.describe() if verdict is not None else "",
            "undoes": undoes,
            "attempts": 0,
            "resends": 0,
        }
        try:
            with transaction.atomic():
                updated = EncoderVersion.objects.filter(
                    pk=target.pk, status__in=[VersionStatus.CANDIDATE, VersionStatus.RETIRED]
                ).update(
                    status=VersionStatus.PROMOTING,
                    staged_rows=0,
                    total_rows=0,
                    promotion_error="",
                    promotion_request=request,
                    promotion_updated_at=timezone.now(),
                )
        except IntegrityError as exc:
            raise PromotionRefused(
                f"Another version of {name!r} is being promoted; wait for it to finish."
            ) from exc
        if not updated:
            raise PromotionRefused(f"{target} cannot be promoted from status {target.status!r}.")
        target.refresh_from_db()
    if run_now:
        _execute(target.pk, refusal_raises=True)
    else:
        _queue_on_commit(target)
    return verdict


def _check_verdict(target: EncoderVersion, verdict: GateResult, force: bool) -> None:
    """``PromotionRefused`` with the numbers when ``verdict`` does not pass and not ``force``."""
    if verdict.passed or force:
        return
    if not verdict.evaluated:
        raise PromotionRefused(
            f"{target} was not compared with the active version ({verdict.describe()}); "
            "a superuser may force the promotion."
        )
    raise PromotionRefused(
        f"{target} is worse than the active version on the eval split "
        f"({verdict.describe()}); a superuser may force the promotion."
    )


def _gate_state(verdict: GateResult) -> str:
    if verdict.passed:
        return "passed"
    return "refused" if verdict.evaluated else "not evaluated"


def _queue_on_commit(target: EncoderVersion) -> None:
    """Publish the promotion's task after COMMIT; if the broker is unreachable, stop promoting
    (back to candidate or retired) and raise ``BrokerUnavailable`` (logged instead, inside a
    transaction, where it can no longer reach the caller). See ``runs._queue_on_commit``."""
    from .tasks import enqueue_promotion  # the allowed loop: this wing's tasks import us

    def publish() -> None:
        try:
            enqueue_promotion(target.pk)
        except BrokerUnavailable as exc:
            cancel_promotion(target)
            EncoderVersion.objects.filter(pk=target.pk).update(
                promotion_error=f"Not started: {exc}"
            )
            target.refresh_from_db()
            raise

    in_transaction = transaction.get_connection().in_atomic_block
    transaction.on_commit(publish, robust=in_transaction)


def promotion_record(active: EncoderVersion) -> PromotionRecord | None:
    """The history row of the promotion that made ``active`` serve and is not undone yet."""
    return (
        PromotionRecord.objects.filter(
            encoder_name=active.encoder_name,
            to_version=active.version,
            kind=PromotionKind.PROMOTION,
            undone_by__isnull=True,
        )
        .order_by("-id")
        .first()
    )


def rollback_target(active: EncoderVersion) -> EncoderVersion:
    """The version that was active before ``active`` was promoted (``PromotionRecord``; a
    version promoted before the history existed: the one it ``replaced``).

    After V1 -> V2 -> V3, rolling V3 back goes to V2, and rolling V2 back then goes to V1,
    never forward to V3.
    """
    if active.status != VersionStatus.ACTIVE:
        raise PromotionRefused(f"{active} is not active; only the active version rolls back.")
    record = promotion_record(active)
    if record is not None:
        before = record.from_version
    elif not PromotionRecord.objects.filter(
        encoder_name=active.encoder_name, to_version=active.version
    ).exists():
        before = active.replaced  # promoted before the history was kept
    else:
        before = ""  # in service by a rollback, and nothing earlier is recorded
    previous = EncoderVersion.objects.filter(
        encoder_name=active.encoder_name, version=before
    ).first()
    if not before or previous is None:
        raise PromotionRefused(f"{active} records no previous version to roll back to.")
    return previous


def rollback(active: EncoderVersion, *, user: Any = None, reason: str = "") -> EncoderVersion:
    """Start switching back from ``active`` to ``rollback_target(active)``; returns the target.

    The target passed the gate when it was promoted, so it is not asked again; a target that
    was *forced* past the gate needs a superuser (``user`` None: code, management commands).
    """
    target = rollback_target(active)
    if user is not None and not (user.is_active and user.is_superuser):
        # How the target last came into service by a promotion (not by a rollback).
        forced = (
            PromotionRecord.objects.filter(
                encoder_name=target.encoder_name,
                to_version=target.version,
                kind=PromotionKind.PROMOTION,
            )
            .order_by("-id")
            .first()
        )
        if forced is not None and forced.forced:
            raise RollbackForbidden(
                f"{target} was forced into service past the evaluation gate "
                f"({forced.gate or 'no verdict'}); only a superuser may roll back to it."
            )
    record = promotion_record(active)
    start_promotion(
        target,
        gate=False,
        user=user,
        reason=reason or f"rollback of {active}",
        kind=PromotionKind.ROLLBACK,
        undoes=record.pk if record is not None else None,
    )
    return target


def cancel_promotion(target: EncoderVersion) -> None:
    """Stop treating ``target`` as being promoted; what it staged stays for a later try."""
    EncoderVersion.objects.filter(pk=target.pk, status=VersionStatus.PROMOTING).update(
        status=VersionStatus.RETIRED if target.activated_at else VersionStatus.CANDIDATE,
        promotion_updated_at=timezone.now(),
    )


def give_back(pk: int, error: str) -> bool:
    """A promotion of version ``pk`` failed: back to candidate (retired, if it served before)
    with ``error``, in one UPDATE, so no reader sees it failed yet still promoting. Returns
    whether it was still promoting."""
    return bool(
        EncoderVersion.objects.filter(pk=pk, status=VersionStatus.PROMOTING).update(
            status=Case(
                When(activated_at__isnull=False, then=Value(VersionStatus.RETIRED)),
                default=Value(VersionStatus.CANDIDATE),
            ),
            promotion_error=error,
            promotion_updated_at=timezone.now(),
        )
    )


def _update_request(pk: int, **changes: Any) -> None:
    """Merge ``changes`` into the version's ``promotion_request`` (one row, under its lock)."""
    with transaction.atomic():
        row = EncoderVersion.objects.select_for_update().filter(pk=pk).first()
        if row is None:
            return
        EncoderVersion.objects.filter(pk=pk).update(
            promotion_request={**(row.promotion_request or {}), **changes},
            promotion_updated_at=timezone.now(),
        )


class _Progress:
    """Throttled writes of ``staged_rows`` while a promotion stages vectors."""

    def __init__(self, pk: int, every: float = 1.0) -> None:
        self.pk = pk
        self.done = 0
        self.every = every
        self.last = 0.0

    def __call__(self, rows: int) -> None:
        self.done += rows
        if time.monotonic() - self.last >= self.every:
            self.flush()

    def flush(self) -> None:
        self.last = time.monotonic()
        EncoderVersion.objects.filter(pk=self.pk).update(
            staged_rows=self.done, promotion_updated_at=timezone.now()
        )


def run_promotion(pk: int) -> dict[str, int] | None:
    """Run the gate if it is pending, stage every row's vectors for version ``pk`` and switch;
    safe to run again after a crash (what the promotion task does).

    Returns rows switched per field, or None when the version is not (any more) promoting or
    the gate refused it (the version is then a candidate again, the refusal its error). Any
    other failure gives the version back with the error too, then is raised.
    """
    return _execute(pk, refusal_raises=False)


class _GateRefused(PromotionRefused):
    """The gate, measured by the task, refused the version (already given back)."""


def _execute(pk: int, *, refusal_raises: bool) -> dict[str, int] | None:
    began = time.monotonic()
    target = EncoderVersion.objects.filter(pk=pk, status=VersionStatus.PROMOTING).first()
    if target is None:
        return None
    request = dict(target.promotion_request or {})
    _update_request(pk, attempts=int(request.get("attempts") or 0) + 1)
    refs = fields_of(target.encoder_name)
    try:
        if request.get("gate") in ("pending", "running"):
            _gate_in_task(target, request)
        total = sum(ref.manager.count() for ref in refs)
        EncoderVersion.objects.filter(pk=pk).update(total_rows=total, staged_rows=0)
        progress = _Progress(pk)
        for ref in refs:
            stage_field(ref, target.version, progress=progress)
        progress.flush()
        # Catch up with rows edited while the pass ran, then switch at once.
        for ref in refs:
            stage_field(ref, target.version)
        # Every process stops caching the serving version once it sees the promotion (within
        # VERSION_CACHE_SECONDS of it starting): after that it sees the switch at once.
        time.sleep(
            max(0.0, float(sbert_settings.VERSION_CACHE_SECONDS) - (time.monotonic() - began))
        )
        if not EncoderVersion.objects.filter(pk=pk, status=VersionStatus.PROMOTING).exists():
            return None  # cancelled meanwhile
        target.refresh_from_db()  # the gate's verdict, for the history row
        return switch(target)
    except _GateRefused:
        if refusal_raises:
            raise
        return None
    except PromotionRefused:
        # Not promoting any more at the switch: cancelled, or switched by a duplicate message
        # (the sweep re-sends promotions that looked lost). Nothing failed.
        return None
    except Exception as exc:
        logger.warning("The promotion of version %s failed: %s", pk, exc)
        try:
            give_back(pk, describe_exception(exc))
        except Exception:  # the database itself is away: the sweep gives it back later
            logger.exception("Recording the failed promotion of version %s failed", pk)
        raise


def _gate_in_task(target: EncoderVersion, request: dict[str, Any]) -> None:
    """Measure the gate that ``start_promotion`` left pending, recording its steps on the
    version (``promotion_request["gate_step"]``); a refusal without ``force`` gives the
    version back and raises ``_GateRefused``."""
    pk = target.pk
    _update_request(pk, gate="running", gate_step=[0, 3])
    verdict = evaluation_gate(
        target, progress=lambda done, total: _update_request(pk, gate_step=[done, total])
    )
    state = _gate_state(verdict)
    _update_request(pk, gate=state, gate_detail=verdict.describe())
    if verdict.passed or request.get("force"):
        return
    try:
        _check_verdict(target, verdict, force=False)
    except PromotionRefused as exc:
        give_back(pk, f"Refused by the evaluation gate: {exc}")
        raise _GateRefused(str(exc)) from None
