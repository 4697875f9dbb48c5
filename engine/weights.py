"""safetensors checkpoints, through the `safetensors` package (header and offset checks, every dtype it
knows, FP8 included, and loading straight to a device).

Tensors load memory-mapped: a 16 GB checkpoint is read only as it is copied where it goes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file


def load_safetensors(path: str | Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """All tensors of a .safetensors file, or of every *.safetensors file in a directory, on `device`."""
    path = Path(path)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(file, device=str(device)))
        except SafetensorError as exc:
            raise ValueError(f"{file}: not a valid safetensors file ({exc})") from None
    return tensors


def save_safetensors(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    """Write tensors (any device; stored contiguous) as one safetensors file."""
    save_file({name: t.detach().contiguous().cpu() for name, t in tensors.items()}, str(path))
