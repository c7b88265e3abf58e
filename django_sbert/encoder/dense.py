"""Dense: the optional projection after pooling (Linear + activation), as sentence-transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from .weights import load_state_dict, save_state_dict


def _activation(name: str | None) -> nn.Module:
    """Resolve ``torch.nn.modules.activation.Tanh``-style names, only from ``torch.nn``."""
    if not name:
        return nn.Identity()
    cls_name = name.rsplit(".", 1)[-1]
    cls = getattr(nn, cls_name, None)
    if not name.startswith("torch.") or not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(
            f"Dense activation {name!r} is not a torch.nn module; only torch.nn activations "
            "are loaded (no code is imported from model directories)."
        )
    return cls()


def _activation_name(module: nn.Module) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


class Dense(nn.Module):
    """``activation(linear(x))`` mapping ``in_features`` to ``out_features``.

    ``use_residual=True`` (sentence-transformers 6) adds the input back:
    ``activation(linear(x)) + x``, through a bias-free ``residual`` projection when the widths
    differ.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        activation_function: str | None = "torch.nn.modules.activation.Tanh",
        use_residual: bool = False,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.bias = bias
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation_function = _activation(activation_function)
        self.use_residual = use_residual
        if use_residual and in_features != out_features:
            self.residual = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (batch, in) -> (batch, out)
        out = self.activation_function(self.linear(x))
        if self.use_residual:
            out = out + (x if self.in_features == self.out_features else self.residual(x))
        return out

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias,
            "activation_function": _activation_name(self.activation_function),
        }
        if self.use_residual:  # releases before sentence-transformers 5.7 reject the key
            config["use_residual"] = True
        return config

    @classmethod
    def load(cls, directory: Path, config: dict[str, Any]) -> Dense:
        dense = cls(
            int(config["in_features"]),
            int(config["out_features"]),
            bool(config.get("bias", True)),
            config.get("activation_function", "torch.nn.modules.activation.Tanh"),
            bool(config.get("use_residual", False)),
        )
        dense.load_state_dict(load_state_dict(directory))
        return dense

    def save(self, directory: Path) -> None:
        save_state_dict(self.state_dict(), directory)
