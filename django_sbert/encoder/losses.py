"""Training objectives for the bi-encoder: the SBERT paper's three and their successors.

Every loss is a small ``nn.Module`` with two halves:

* ``embed_columns(embed, columns)`` turns a batch of text columns into embeddings with the
  encoder being trained (``embed`` is ``texts -> (batch, dim)`` tensor, differentiable);
* ``compute_loss_from_embeddings(embeddings, labels)`` is the math alone, so it can be tested
  on hand-made tensors without any model.

The class attributes describe the examples a loss trains on (``text_columns``, ``label_kind``,
``example_shape``); ``django_sbert.encoder.data`` validates examples against them before
training starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

EmbedFn = Callable[[list[str]], Tensor]  # texts -> (batch, dim)


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """All-pairs cosine similarity: (n, dim) x (m, dim) -> (n, m)."""
    return F.normalize(a, p=2, dim=-1) @ F.normalize(b, p=2, dim=-1).T


def embed_jointly_if_alike(embed: EmbedFn, columns: Sequence[list[str]]) -> list[Tensor]:
    """Embed text columns, in one forward pass when their texts are of similar length.

    One pass over all columns multiplies bigger matrices (about 10% faster on CPU for STS
    pairs); but short queries padded to the length of long passages would waste most of the
    compute, so columns of unlike length get a pass each.
    """
    longest = [max(len(text) for text in texts) for texts in columns]
    if len(columns) > 1 and max(longest) <= 1.5 * min(longest):
        joint = embed([text for texts in columns for text in texts])  # (columns * batch, dim)
        return list(joint.split([len(texts) for texts in columns]))
    return [embed(list(texts)) for texts in columns]


class EmbeddingLoss(nn.Module):
    """Base class: embed each text column, then hand the embeddings to the math."""

    name: ClassVar[str] = ""
    text_columns: ClassVar[tuple[int, ...]] = (2,)  # allowed numbers of texts per example
    # "float", "int", "margins" (a float per text after the second) or None (no label)
    label_kind: ClassVar[str | None] = None
    example_shape: ClassVar[str] = ""  # how the examples look, for error messages
    in_batch_negatives: ClassVar[bool] = False  # other rows of the batch act as negatives
    # The loss compares examples with each other, so batches must be random samples: batches
    # sorted by length would only ever compare look-alike examples (e.g. one STSb genre).
    compares_examples: ClassVar[bool] = False

    def embed_columns(self, embed: EmbedFn, columns: Sequence[list[str]]) -> list[Tensor]:
        return embed_jointly_if_alike(embed, columns)

    def forward(
        self, embed: EmbedFn, columns: Sequence[list[str]], labels: Tensor | None
    ) -> Tensor:
        return self.compute_loss_from_embeddings(self.embed_columns(embed, columns), labels)

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        raise NotImplementedError("compute_loss_from_embeddings() must be overridden by each loss")

    def config(self) -> dict[str, Any]:
        """The loss's settings as JSON-ready data (stored with a training run)."""
        return {"name": self.name}


class SoftmaxLoss(EmbeddingLoss):
    """SBERT's NLI objective: a linear classifier over (u, v, |u - v|), cross-entropy on labels.

    The classifier is trained alongside the encoder and thrown away afterwards.
    """

    name = "softmax"
    label_kind = "int"
    example_shape = "(sentence_a, sentence_b, label) with label an int in [0, num_labels)"

    def __init__(self, dimensions: int, num_labels: int = 3) -> None:
        super().__init__()
        self.dimensions = dimensions
        self.num_labels = num_labels
        self.classifier = nn.Linear(3 * dimensions, num_labels)

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        u, v = embeddings  # (batch, dim) each
        features = torch.cat([u, v, (u - v).abs()], dim=-1)  # (batch, 3 * dim)
        logits = self.classifier(features)  # (batch, num_labels)
        return F.cross_entropy(logits, labels)

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "num_labels": self.num_labels}


class CosineLoss(EmbeddingLoss):
    """SBERT's regression objective: MSE between cos(u, v) and a gold score."""

    name = "cosine"
    label_kind = "float"
    example_shape = "(sentence_a, sentence_b, score) with score a float in [-1, 1], usually [0, 1]"

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        u, v = embeddings  # (batch, dim) each
        cos = F.cosine_similarity(u, v, dim=-1)  # (batch,)
        return F.mse_loss(cos, labels.to(cos.dtype))


class CoSENTLoss(EmbeddingLoss):
    """CoSENT (Su 2022): rank the pairs of a batch by cosine in the order of their gold scores.

    loss = log(1 + sum over (i, j) with score_i > score_j of exp(scale * (cos_j - cos_i))).
    Only the order of the scores matters, so any scale of score works.
    """

    name = "cosent"
    label_kind = "float"
    compares_examples = True
    example_shape = "(sentence_a, sentence_b, score) with score any float (only its order matters)"

    def __init__(self, scale: float = 20.0) -> None:
        super().__init__()
        self.scale = scale

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        u, v = embeddings  # (batch, dim) each
        cos = self.scale * F.cosine_similarity(u, v, dim=-1).float()  # (batch,)
        delta = cos[None, :] - cos[:, None]  # (batch, batch): [i, j] = s*(cos_j - cos_i)
        wrong_order = labels[:, None] > labels[None, :]  # (batch, batch): score_i > score_j
        terms = delta[wrong_order]  # (pairs,)
        zero = torch.zeros(1, dtype=terms.dtype, device=terms.device)  # the "1 +" inside the log
        return torch.logsumexp(torch.cat([zero, terms]), dim=0)

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "scale": self.scale}


class TripletLoss(EmbeddingLoss):
    """SBERT's triplet objective: max(||a - p|| - ||a - n|| + margin, 0), Euclidean, margin 1."""

    name = "triplet"
    text_columns = (3,)
    example_shape = "(anchor, positive, negative)"

    def __init__(self, margin: float = 1.0) -> None:
        super().__init__()
        self.margin = margin

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        a, p, n = embeddings  # (batch, dim) each
        d_ap = F.pairwise_distance(a, p, p=2)  # (batch,)
        d_an = F.pairwise_distance(a, n, p=2)  # (batch,)
        return F.relu(d_ap - d_an + self.margin).mean()

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "margin": self.margin}


MAX_HARD_NEGATIVES = 16  # per example, for mnrl and its variants; other passages for margin_mse


class MarginMSELoss(EmbeddingLoss):
    """Margin-MSE distillation (Hofstätter et al. 2020; GPL, Wang et al. 2022): the student's
    ``cos(q, a) - cos(q, b)`` regresses a teacher's margin for the same query and passages.

    Only differences are learned, so a teacher on another scale works once its margins are in
    cosine units, and a passage the teacher half-likes is neither forced up as a positive nor
    down as a negative.

    An example may hold several other passages, ``(query, a, b_1, ..., b_n, [m_1, ..., m_n])``
    with ``m_i = teacher(a) - teacher(b_i)`` (sentence-transformers' shape): the query and
    ``a`` are embedded once for all n margins, so n margins cost n + 2 texts instead of 3n.
    """

    name = "margin_mse"
    text_columns = tuple(range(3, 3 + MAX_HARD_NEGATIVES))
    label_kind = "margins"
    example_shape = (
        "(query, passage_a, passage_b, margin) with margin = teacher(a) - teacher(b), or "
        "(query, passage_a, b_1, ..., b_n, [m_1, ..., m_n]) with m_i = teacher(a) - teacher(b_i)"
    )

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        q, a, *others = embeddings  # (batch, dim) each
        own = F.cosine_similarity(q, a, dim=-1)  # (batch,)
        other = torch.stack([F.cosine_similarity(q, b, dim=-1) for b in others], dim=1)
        margin = own[:, None] - other  # (batch, n)
        return F.mse_loss(margin, labels.to(margin.dtype).reshape(margin.shape))


DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")
PARTITION_MODES = ("joint", "per_direction")
HARDNESS_MODES = ("in_batch_negatives", "hard_negatives", "all_negatives")


class MultipleNegativesRankingLoss(EmbeddingLoss):
    """In-batch negatives InfoNCE: each anchor must pick its own positive among all candidates.

    Candidates are every positive of the batch plus, when examples carry one, every hard
    negative. Scores are scale * cos (scale 20 = temperature 0.05); cross-entropy against the
    diagonal. The batch builder keeps a text from appearing twice in a batch, since a
    duplicate would be a false negative.

    The options are sentence-transformers' (same names, same math):

    * ``directions`` adds terms to the softmax's denominator besides ``query_to_doc`` (the
      anchor against every candidate, always there): ``doc_to_query`` (each positive against
      every anchor: the symmetric loss), ``query_to_query`` (each anchor against the other
      anchors) and ``doc_to_doc`` (each positive against the other rows' candidates); all
      four with ``partition_mode="joint"`` is GTE's improved contrastive loss (Li et al.
      2023).
    * ``partition_mode``: ``"joint"``, one softmax over every direction's scores, or
      ``"per_direction"``, one softmax per direction, averaged (only for directions whose
      candidates hold the positive: ``query_to_doc`` and ``doc_to_query``).
    * ``hardness_mode`` with ``hardness_strength`` (alpha) adds ``alpha * cos`` (no gradient
      through it) to negatives' logits, so the harder a negative the more it weighs:
      ``"in_batch_negatives"`` (the other rows' candidates; Lan et al. 2025 use alpha 9),
      ``"hard_negatives"`` (the row's own mined negatives; EmbeddingGemma uses 5) or
      ``"all_negatives"``.
    """

    name = "mnrl"
    # A pair, or a pair with hard negatives (mine_hard_negatives(negatives=n)).
    text_columns = tuple(range(2, 3 + MAX_HARD_NEGATIVES))
    example_shape = (
        "(anchor, positive), (anchor, positive, hard_negative) or "
        "(anchor, positive, negative_1, ..., negative_n)"
    )
    in_batch_negatives = True
    compares_examples = True

    def __init__(
        self,
        scale: float = 20.0,
        directions: Sequence[str] = ("query_to_doc",),
        partition_mode: str = "joint",
        hardness_mode: str | None = None,
        hardness_strength: float = 0.0,
    ) -> None:
        super().__init__()
        self.scale = scale
        self.directions = _directions(directions, partition_mode)
        self.partition_mode = partition_mode
        self.hardness_mode, self.hardness_strength = _hardness(hardness_mode, hardness_strength)

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        anchors, positives = embeddings[0], embeddings[1]  # (batch, dim) each
        candidates = torch.cat(embeddings[1:], dim=0)  # (batch * (1 + negatives), dim)
        batch, columns = anchors.size(0), len(embeddings) - 1
        rows = torch.arange(batch, device=anchors.device)  # positive i sits at column i
        to_docs = cosine_matrix(anchors, candidates)  # (batch, candidates)
        own = torch.eye(batch, dtype=torch.bool, device=anchors.device).repeat(1, columns)
        logits = {"query_to_doc": self.scale * to_docs}
        if self.hardness_mode is not None:
            logits["query_to_doc"] = logits["query_to_doc"] + self.hardness_strength * (
                to_docs.detach().masked_fill(~self._penalised(own, batch), 0.0)
            )
        if "query_to_query" in self.directions:
            others = cosine_matrix(anchors, anchors).masked_fill(own[:, :batch], float("-inf"))
            logits["query_to_query"] = self.scale * others  # (batch, batch)
        if "doc_to_query" in self.directions:
            logits["doc_to_query"] = self.scale * cosine_matrix(positives, anchors)
        if "doc_to_doc" in self.directions:
            # A row's own candidates (its positive, its negatives) are no negatives of it.
            others = cosine_matrix(positives, candidates).masked_fill(own, float("-inf"))
            logits["doc_to_doc"] = self.scale * others  # (batch, candidates)
        # Cross-entropy against the diagonal: the positive of row i is column i of query_to_doc
        # (first, so also of the joint scores) and of doc_to_query.
        if self.partition_mode == "joint":
            return F.cross_entropy(torch.cat(list(logits.values()), dim=1), rows)
        return sum(F.cross_entropy(v, rows) for v in logits.values()) / len(logits)

    def _penalised(self, own: Tensor, batch: int) -> Tensor:
        """Which query-to-candidate logits get the hardness term, (batch, candidates)."""
        hard = own.clone()
        hard[:, :batch] = False  # the row's own mined negatives
        if self.hardness_mode == "hard_negatives":
            return hard
        in_batch = ~own  # the other rows' positives and negatives
        return in_batch if self.hardness_mode == "in_batch_negatives" else in_batch | hard

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"name": self.name, "scale": self.scale}
        if self.directions != ("query_to_doc",):
            config |= {"directions": list(self.directions), "partition_mode": self.partition_mode}
        if self.hardness_mode is not None:
            config |= {
                "hardness_mode": self.hardness_mode,
                "hardness_strength": self.hardness_strength,
            }
        return config


def _directions(directions: Sequence[str], partition_mode: str) -> tuple[str, ...]:
    """The validated ``directions`` of an in-batch loss (a JSON list is fine)."""
    if isinstance(directions, str) or not all(isinstance(d, str) for d in directions):
        raise ValueError(f"directions must be a list of names, got {directions!r}")
    unknown = [d for d in directions if d not in DIRECTIONS]
    if unknown:
        raise ValueError(f"Unknown directions {unknown}; choose among: {', '.join(DIRECTIONS)}")
    if "query_to_doc" not in directions:
        raise ValueError("directions must include 'query_to_doc' (it holds the positive pair)")
    if partition_mode not in PARTITION_MODES:
        raise ValueError(
            f"partition_mode must be 'joint' or 'per_direction', got {partition_mode!r}"
        )
    same_kind = {"query_to_query", "doc_to_doc"} & set(directions)
    if partition_mode == "per_direction" and same_kind:
        raise ValueError(
            f"partition_mode 'per_direction' needs the positive among every direction's "
            f"candidates, which {sorted(same_kind)} lack; use partition_mode 'joint'"
        )
    return tuple(dict.fromkeys(directions))


def _hardness(mode: str | None, strength: float) -> tuple[str | None, float]:
    """The validated ``hardness_mode`` and ``hardness_strength`` of an in-batch loss."""
    if mode is not None and mode not in HARDNESS_MODES:
        raise ValueError(
            f"hardness_mode must be one of {', '.join(HARDNESS_MODES)} or None, got {mode!r}"
        )
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not strength >= 0:
        raise ValueError(f"hardness_strength must be a number >= 0, got {strength!r}")
    if mode is not None and strength == 0:
        raise ValueError(
            f"hardness_mode {mode!r} does nothing at hardness_strength 0; "
            "give an alpha > 0 (5 to 9 is usual)"
        )
    if mode is None and strength != 0:
        raise ValueError("hardness_strength needs a hardness_mode to apply to")
    return mode, float(strength)


class CachedMultipleNegativesRankingLoss(MultipleNegativesRankingLoss):
    """MNRL over a big batch in the memory of a small one: GradCache (Gao et al. 2021).

    In-batch negatives get better with the batch, but a batch's activations must all be kept
    for the backward pass, which caps it at 16-32 on a CPU. This loss

    1. embeds each column in chunks of ``mini_batch_size`` without gradients, saving each
       chunk's random state (dropout);
    2. computes the loss over the whole batch from those embeddings, and its gradient with
       respect to them (cheap: a (batch, candidates) matrix);
    3. when the loss is back-propagated, embeds each chunk again with gradients under the same
       random state, and back-propagates the cached gradient chunk by chunk.

    The loss and the gradients are those of plain ``mnrl`` on the whole batch; only one chunk's
    activations are alive at a time, at the price of a second forward pass.
    """

    name = "cached_mnrl"

    def __init__(self, scale: float = 20.0, mini_batch_size: int = 16, **options: Any) -> None:
        super().__init__(scale, **options)
        if not isinstance(mini_batch_size, int) or mini_batch_size < 1:
            raise ValueError(
                f"mini_batch_size must be a whole number >= 1, got {mini_batch_size!r}"
            )
        self.mini_batch_size = mini_batch_size

    def forward(
        self, embed: EmbedFn, columns: Sequence[list[str]], labels: Tensor | None
    ) -> Tensor:
        if not torch.is_grad_enabled():
            return super().forward(embed, columns, labels)
        chunks: list[tuple[list[str], tuple[Tensor, list[Tensor]]]] = []
        reps = []
        with torch.no_grad():
            for texts in columns:
                parts = []
                for start in range(0, len(texts), self.mini_batch_size):
                    chunk = list(texts[start : start + self.mini_batch_size])
                    chunks.append((chunk, _rng_state()))
                    parts.append(embed(chunk))  # (chunk, dim), no graph kept
                reps.append(torch.cat(parts).requires_grad_())  # (batch, dim) leaf
        loss = self.compute_loss_from_embeddings(reps, labels)
        grads = torch.autograd.grad(loss, reps)  # d loss / d embedding, (batch, dim) each
        cached = [g for grad in grads for g in grad.split(self.mini_batch_size)]
        after_first_pass = _rng_state()

        def replay(grad_output: Tensor) -> None:
            with torch.enable_grad():
                for (chunk, state), grad in zip(chunks, cached, strict=True):
                    _set_rng_state(state)  # the same dropout masks as the first pass
                    embed(chunk).backward(grad * grad_output)
            _set_rng_state(after_first_pass)

        value = loss.detach().requires_grad_()
        value.register_hook(replay)  # value.backward() runs the chunks' backward passes
        return value

    def config(self) -> dict[str, Any]:
        return super().config() | {"mini_batch_size": self.mini_batch_size}


def _rng_state() -> tuple[Tensor, list[Tensor]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[Tensor, list[Tensor]]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda:
        torch.cuda.set_rng_state_all(cuda)


class SimCSELoss(MultipleNegativesRankingLoss):
    """Unsupervised SimCSE (Gao et al. 2021): a text and itself under a second dropout mask are
    the positive pair; the other texts of the batch are the negatives. Needs no labels, so a
    site can adapt the encoder to its own text. The encoder must be in train mode.
    """

    name = "simcse"
    text_columns = (1,)
    example_shape = "a plain text (str)"

    def embed_columns(self, embed: EmbedFn, columns: Sequence[list[str]]) -> list[Tensor]:
        (texts,) = columns
        # Each row gets its own dropout mask, so one pass over the texts twice gives two views.
        return embed_jointly_if_alike(embed, [list(texts), list(texts)])


class MatryoshkaLoss(EmbeddingLoss):
    """Matryoshka representation learning: apply ``inner`` to the first d dimensions for each d,
    so vectors truncated to 256/128/64 dimensions stay useful. Embeddings are computed once.
    """

    name = "matryoshka"

    def __init__(
        self,
        inner: EmbeddingLoss,
        dims: Sequence[int],
        weights: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(inner, (SoftmaxLoss, MatryoshkaLoss)):
            raise ValueError(
                f"matryoshka cannot wrap {inner.name!r}; wrap cosine, cosent, triplet, "
                "mnrl or simcse."
            )
        if not dims or any(int(d) <= 0 for d in dims):
            raise ValueError(f"matryoshka dims must be positive integers, got {list(dims)}")
        self.inner = inner
        self.dims = tuple(int(d) for d in dims)
        self.weights = tuple(float(w) for w in weights) if weights else (1.0,) * len(self.dims)
        if len(self.weights) != len(self.dims):
            raise ValueError("matryoshka needs one weight per dimension (or no weights)")
        # Examples look exactly like the inner loss's.
        self.text_columns = inner.text_columns
        self.label_kind = inner.label_kind
        self.example_shape = inner.example_shape
        self.in_batch_negatives = inner.in_batch_negatives
        self.compares_examples = inner.compares_examples

    def embed_columns(self, embed: EmbedFn, columns: Sequence[list[str]]) -> list[Tensor]:
        return self.inner.embed_columns(embed, columns)

    def compute_loss_from_embeddings(
        self, embeddings: list[Tensor], labels: Tensor | None
    ) -> Tensor:
        total = embeddings[0].new_zeros(())
        for dim, weight in zip(self.dims, self.weights, strict=True):
            truncated = [e[..., :dim] for e in embeddings]  # (batch, dim) each
            total = total + weight * self.inner.compute_loss_from_embeddings(truncated, labels)
        return total

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inner": self.inner.config(),
            "dims": list(self.dims),
            "weights": list(self.weights),
        }


LOSSES: dict[str, type[EmbeddingLoss]] = {
    cls.name: cls
    for cls in (
        SoftmaxLoss,
        CosineLoss,
        CoSENTLoss,
        TripletLoss,
        MarginMSELoss,
        MultipleNegativesRankingLoss,
        CachedMultipleNegativesRankingLoss,
        SimCSELoss,
        MatryoshkaLoss,
    )
}


def default_matryoshka_dims(dimensions: int) -> tuple[int, ...]:
    """The full width, then the usual smaller widths below it: 384 -> (384, 256, 128, 64)."""
    smaller = [d for d in (768, 512, 256, 128, 64) if d < dimensions]
    return (dimensions, *smaller)


def build_loss(name: str | EmbeddingLoss, dimensions: int, **options: Any) -> EmbeddingLoss:
    """Make a loss from its name and options (``scale``, ``margin``, ``num_labels``...).

    ``matryoshka`` takes ``inner`` (a loss name, default ``"mnrl"``), ``dims`` (default
    ``default_matryoshka_dims(dimensions)``), ``weights`` and the inner loss's own options.
    An ``EmbeddingLoss`` instance is returned as is.
    """
    if isinstance(name, EmbeddingLoss):
        if options:
            raise ValueError("loss_options apply to a loss given by name, not to a loss instance")
        return name
    if not isinstance(name, str) or name not in LOSSES:
        raise ValueError(f"Unknown loss {name!r}; choose one of: {', '.join(LOSSES)}.")
    try:
        if name == "softmax":
            return SoftmaxLoss(dimensions, **options)
        if name == "matryoshka":
            inner_name = options.pop("inner", "mnrl")
            dims = options.pop("dims", None) or default_matryoshka_dims(dimensions)
            weights = options.pop("weights", None)
            if any(int(d) > dimensions for d in dims):
                raise ValueError(
                    f"matryoshka dims {list(dims)} exceed the encoder's {dimensions} dimensions"
                )
            inner = build_loss(inner_name, dimensions, **options)
            return MatryoshkaLoss(inner, dims, weights)
        return LOSSES[name](**options)
    except TypeError as exc:  # an option the loss does not take
        raise ValueError(f"Bad loss_options for {name!r}: {exc}") from None
