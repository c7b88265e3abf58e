"""Read and write module weights: safetensors first, never an unrestricted unpickle."""

from __future__ import annotations

from pathlib import Path

import torch


def load_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    """Load ``model.safetensors``, else ``pytorch_model.bin`` with ``weights_only=True``.

    ``weights_only`` restricts unpickling to tensors and plain containers, so a hostile
    checkpoint cannot run code.
    """
    safetensors_file = directory / "model.safetensors"
    if safetensors_file.exists():
        from safetensors.torch import load_file

        return load_file(str(safetensors_file))
    bin_file = directory / "pytorch_model.bin"
    if bin_file.exists():
        return torch.load(bin_file, map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{directory} has neither model.safetensors nor pytorch_model.bin")


def save_state_dict(state: dict[str, torch.Tensor], directory: Path) -> None:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().contiguous().cpu() for k, v in state.items()},
        str(directory / "model.safetensors"),
    )
