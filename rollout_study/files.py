"""Atomic writes (a reader never sees half a file, two writers never share a temporary name), the
checks around a result file (writable before a run, a named fallback when the final write fails), and
reading a parameter or sweep file's YAML with errors that name it."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def write_json_atomic(data: dict, path: str | os.PathLike) -> str:
    """Write JSON to a uniquely named temporary file beside `path`, then rename over it."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, allow_nan=False, default=_jsonable)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a published result is for everyone to read
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_text(path: str | os.PathLike, text: str) -> None:
    """Text written beside under a unique name, then renamed over `path`."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def save(result, output: Path) -> Path:
    """Write the result; if that fails at the end of a run (disk full, folder gone), a fallback keeps it."""
    import tempfile

    try:
        result.write(output)
        return output
    except OSError as err:
        print(f"error: writing {output} failed: {err}", file=sys.stderr, flush=True)
        fd, fallback = tempfile.mkstemp(prefix="rollout-result-", suffix=".json")
        os.close(fd)
        result.write(fallback)
        return Path(fallback)


def writable(path: Path) -> str | None:
    """Why a result file cannot be written at `path`, or None: checked before a run, not after it."""
    if not str(path) or path.name in ("", ".", ".."):
        return "not a file name"
    if path.is_dir():
        return "is a folder"
    folder = path.parent if str(path.parent) else Path(".")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    import tempfile

    try:  # a real probe: permissions alone do not tell (root, read-only mounts, /proc)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        return f"the folder {existing} is not writable ({err.strerror or err})"
    return None


def check_output_dir(output_dir: str, what: str = "output_dir") -> None:
    """A run folder its result.json can be written into, checked before the run (a file there once lost a whole
    study's result at its end)."""
    from .param_values import ParameterError

    problem = writable(Path(output_dir) / "result.json")
    if problem:
        raise ParameterError(f"{what} {output_dir!r}: {problem}; allowed: a folder, existing or not, that can be "
                             "written")


def _unique_keys_loader():
    """yaml's safe loader, which refuses a key given twice in one mapping: safe_load keeps the last without a
    word, so `requests: 0` above `requests: 1` would pass as 1."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor` merges, and the keys after it may override what it brings
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice",
                                                            key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeys


def read_yaml(path: str, what: str) -> Any:
    """A parameter or sweep file's YAML; a missing file, a folder, bytes that are not UTF-8 or text that is not
    YAML is a ParameterError naming the file (bad input, exit 2), never a traceback."""
    import yaml

    from .param_values import ParameterError

    if os.path.isdir(path):
        raise ParameterError(f"{what} {path!r} is a folder; allowed: a YAML file")
    if not os.path.isfile(path):
        raise ParameterError(f"{what} {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_unique_keys_loader())
    except UnicodeDecodeError as err:
        raise ParameterError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except yaml.YAMLError as err:
        raise ParameterError(f"{path}: not valid YAML: {err}") from None
    except OSError as err:
        raise ParameterError(f"{what} {path!r} cannot be read: {err.strerror or err}") from None
