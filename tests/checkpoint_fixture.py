"""A checkpoint folder that passes the parameters' checks without loading: config.json and a safetensors file of
no tensors (its header the only thing the checks read)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

NO_TENSORS = struct.pack("<Q", 2) + b"{}"  # a header's length, then the header: a safetensors file with nothing in it


def fake_checkpoint(folder: Path, config: dict | str | None = None, weights: bytes | None = NO_TENSORS) -> Path:
    """`folder` made with config.json (a dict as JSON, a str as written; default a llama) and model.safetensors
    holding `weights` (None: no weights file)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config or {"model_type": "llama"})
    (folder / "config.json").write_text(text, encoding="utf-8")
    if weights is not None:
        (folder / "model.safetensors").write_bytes(weights)
    return folder
