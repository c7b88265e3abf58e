"""Pooling: turn token states (batch, seq, hidden) into one sentence vector per text."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .spec import POOLING_MODES

__all__ = ["POOLING_MODES", "Pooling"]


class Pooling(nn.Module):
    """Attention-mask aware pooling; several modes are concatenated in the order given.

    ``include_prompt=False`` leaves the prompt's tokens (e.g. "query: ") out of the pool, as
    instruction-tuned models expect.
    """

    config_keys = ("embedding_dimension", "pooling_mode", "include_prompt")

    def __init__(
        self,
        embedding_dimension: int,
        pooling_mode: str | tuple[str, ...] = "mean",
        include_prompt: bool = True,
    ) -> None:
        super().__init__()
        modes = (pooling_mode,) if isinstance(pooling_mode, str) else tuple(pooling_mode)
        unknown = [mode for mode in modes if mode not in POOLING_MODES]
        if unknown or not modes:
            raise ValueError(f"Unknown pooling mode(s) {unknown}; choose from {POOLING_MODES}.")
        self.embedding_dimension = embedding_dimension
        self.modes = modes
        self.include_prompt = include_prompt

    @property
    def output_dimension(self) -> int:
        return self.embedding_dimension * len(self.modes)

    def get_config(self) -> dict[str, Any]:
        mode: str | list[str] = self.modes[0] if len(self.modes) == 1 else list(self.modes)
        return {
            "embedding_dimension": self.embedding_dimension,
            "pooling_mode": mode,
            "include_prompt": self.include_prompt,
        }

    def forward(
        self,
        token_embeddings: torch.Tensor,  # (batch, seq, hidden)
        attention_mask: torch.Tensor,  # (batch, seq), 1 for real tokens
        prompt_length: int = 0,
    ) -> torch.Tensor:  # (batch, hidden * len(modes))
        mask = attention_mask
        if prompt_length and not self.include_prompt:
            mask = mask.clone()
            mask[:, :prompt_length] = 0  # right padding: the prompt opens every row
        # Half-precision states are summed in fp32 so long texts do not lose precision.
        accumulate = (
            torch.float32
            if token_embeddings.dtype in (torch.float16, torch.bfloat16)
            else token_embeddings.dtype
        )
        mask3 = mask.unsqueeze(-1).to(token_embeddings.dtype)  # (batch, seq, 1)
        outputs: list[torch.Tensor] = []
        for mode in self.modes:
            if mode == "cls":
                first = mask.to(torch.int32).argmax(dim=1)  # first attended position
                outputs.append(token_embeddings[torch.arange(len(first)), first])
            elif mode == "max":
                masked = token_embeddings.masked_fill(mask3 == 0, float("-inf"))
                outputs.append(masked.max(dim=1).values)
            elif mode in ("mean", "mean_sqrt_len_tokens"):
                total = (token_embeddings * mask3).sum(dim=1, dtype=accumulate)  # (batch, hidden)
                count = mask3.sum(dim=1, dtype=accumulate).clamp(min=1e-9)  # (batch, 1)
                denominator = count if mode == "mean" else count.sqrt()
                outputs.append((total / denominator).to(token_embeddings.dtype))
            elif mode == "weightedmean":
                positions = torch.arange(
                    1, token_embeddings.shape[1] + 1, device=mask.device, dtype=accumulate
                ).view(1, -1, 1)
                weights = mask3.to(accumulate) * positions  # later tokens weigh more
                total = (token_embeddings * weights).sum(dim=1)
                outputs.append(
                    (total / weights.sum(dim=1).clamp(min=1e-9)).to(token_embeddings.dtype)
                )
            else:  # lasttoken
                last = mask.sum(dim=1).clamp(min=1) - 1  # right padding: last real token
                outputs.append(token_embeddings[torch.arange(len(last)), last])
        return torch.cat(outputs, dim=-1)
