"""A dequantized copy of the pretrained GGUF model on local disk, made once and read by every process.

Transformers parses the GGUF file and dequantizes it on every load, about 20 s of CPU per process
on the development machine, and a study starts many processes (a sweep point, each cold start,
the profiling process). So the first load writes what Transformers built, the float32 weights
(safetensors), the config without the GGUF quantizer and the tokenizer, into a folder named after
the GGUF file's sha256, the gguf and Transformers versions that dequantized it and this module's
format; later loads read that folder in about a second. Loading
the copy in a dtype casts the same float32 values that loading the GGUF file in that dtype does
(tests check the weights bit for bit and the tokenizer's output).

The folder is written under a temporary name and renamed into place, so a process never reads a
half-written copy, and two processes that make it at once both end with a whole one. Set
`ROLLOUT_STUDY_CACHE` to a folder to put the copies there, or to `off` to load the GGUF file every
time; where the copy cannot be written (a read-only or full disk), the GGUF file is loaded.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from .environment import package_version

CACHE_ENV = "ROLLOUT_STUDY_CACHE"
COMPLETE = "copy-complete"  # written last, before the rename: a folder without it is not a copy
CACHE_FORMAT = 1  # raised when _write_copy changes what a copy holds, so older copies are not read


def cache_root() -> Path | None:
    """Where copies live; None when caching is off."""
    value = os.environ.get(CACHE_ENV, "")
    if value.lower() == "off":
        return None
    default = Path.home() / ".cache" / "rollout-study"
    root = Path(value).expanduser() if value else default
    if not root.is_absolute():
        # Read in a notebook kernel whose working folder is the run's: a relative folder would put a
        # 500 MB copy into every run folder.
        import warnings

        warnings.warn(f"{CACHE_ENV}={value!r} is not an absolute folder; using {default}", stacklevel=2)
        return default
    return root


@functools.lru_cache(maxsize=4)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    # Keyed by size and time too: a process that loads the tokenizer, then the model, reads the
    # 98 MB file once, and a replaced file is read again.
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def copy_folder(gguf_path: str, root: Path) -> Path:
    """Named after what made the copy: the file, the code that dequantizes it (gguf, Transformers) and this module."""
    stat = os.stat(gguf_path)
    versions = f"gguf-{package_version('gguf')}-transformers-{package_version('transformers')}"
    digest = _sha256(gguf_path, stat.st_size, stat.st_mtime_ns)
    return root / f"{Path(gguf_path).stem}-{digest[:16]}-{versions}-format{CACHE_FORMAT}"


def _write_copy(gguf_path: str, target: Path) -> None:
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32,
                                                     local_files_only=True)
        # save_pretrained refuses a model loaded from GGUF (its quantizer is not serializable), but the
        # parameters are plain dequantized tensors: the config without the quantizer, and the weights.
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        type(model.config).from_dict(config).save_pretrained(partial)
        save_model(model, str(partial / "model.safetensors"))  # a tied embedding is stored once
        tokenizer.save_pretrained(partial)
        (partial / COMPLETE).write_text(f"{filename}\n", encoding="utf-8")
        try:
            os.replace(partial, target)
        except OSError:
            if not (target / COMPLETE).is_file():  # not another process's finished copy: a real failure
                raise
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)


def complete_copy(gguf_path: str) -> Path | None:
    """The dequantized copy's folder where a whole one is already there; None otherwise (nothing is made)."""
    root = cache_root()
    target = None if root is None else copy_folder(gguf_path, root)
    return target if target is not None and (target / COMPLETE).is_file() else None


def local_copy(gguf_path: str) -> Path | None:
    """The folder of the dequantized copy of `gguf_path`, made if missing; None when caching is off."""
    root = cache_root()
    if root is None:
        return None
    target = copy_folder(gguf_path, root)
    if not (target / COMPLETE).is_file():  # only whole copies are ever renamed into place
        try:
            _write_copy(gguf_path, target)
        except Exception as err:  # a read-only or full disk (safetensors, tokenizers raise their own)
            import warnings

            warnings.warn(f"no dequantized copy at {target} ({err}); loading the GGUF file", stacklevel=2)
            return None
    return target
