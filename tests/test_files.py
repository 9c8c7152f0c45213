"""files.py: what a run writes is readable by everyone, and a failed write leaves no temporary file."""
from __future__ import annotations

import os
import stat

import pytest

from rollout_study import files


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_written_files_are_for_everyone_to_read(tmp_path):
    # mkstemp makes its file 0600: a published result.json or index.html renamed from it unchanged is the
    # writer's alone, and the report page served from reports/ cannot read it
    files.write_json_atomic({"a": 1}, tmp_path / "r.json")
    files.write_text(tmp_path / "index.html", "<p>x</p>")
    assert _mode(tmp_path / "r.json") == 0o644 and _mode(tmp_path / "index.html") == 0o644


def test_a_failed_text_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "index.html"
    files.write_text(path, "old")
    with pytest.raises(UnicodeEncodeError):
        files.write_text(path, "\ud800")  # a lone surrogate: the encoder refuses it half-way through the write
    assert path.read_text(encoding="utf-8") == "old" and os.listdir(tmp_path) == ["index.html"]
