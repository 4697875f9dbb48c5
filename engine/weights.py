"""Reading and writing safetensors files with torch alone (the format is an 8-byte little-endian
header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw bytes).

Tensors are memory-mapped copy-on-write: loading a 16 GB checkpoint reads pages only as they are
copied to the device.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has dtype {info['dtype']!r}; expected one of {sorted(DTYPES)}")
        dtype = DTYPES[info["dtype"]]
        start, end = info["data_offsets"]
        count = (end - start) // dtype.itemsize
        tensor = torch.frombuffer(buf, dtype=dtype, count=count, offset=8 + header_len + start) if count else \
            torch.empty(0, dtype=dtype)
        out[name] = tensor.reshape(info["shape"])
    return out


def load_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a .safetensors file, or of every *.safetensors file in a directory (CPU, mmapped)."""
    path = Path(path)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(_load_file(file))
    return tensors


def save_safetensors(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    """Write tensors (any device; stored contiguous, little-endian) as one safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for data in blobs:
            f.write(data)
