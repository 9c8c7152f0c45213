"""The README's block for a published curve sweep, rebuilt from its raw points: per model, the steady
speed-up over generate() at every batch and new-token count, and a line on what ran where. The test
that the README's block is what this renders keeps hand-typed figures out of it.

Rewrite the README's blocks after publishing: python -m rollout_study.present.sweep_readme README.md
"""
from __future__ import annotations

import sys
from pathlib import Path

from .. import sweep
from .. import sweep_curves as curves
from ..result import Result
from .markdown import table
from .sweep import models_without_a_valid_point, wall_seconds
from .sweep_figures import model_title
from .text import fill_blocks, readme_blocks

BLOCK = readme_blocks("sweep")


def speedup_grid(points: list[curves.Point]) -> list[str]:
    """One row per variant and new-token count, one column per batch: eager's steady median over the
    variant's (x), '-' where no valid point gives it."""
    rows = curves.speedups(points)
    cells = {}
    for r in rows:
        if (r.variant, r.new_tokens, r.batch) in cells:  # another axis (requests, prompt length) would hide here
            raise ValueError(f"two points give {r.variant} at batch {r.batch} and {r.new_tokens} new tokens: "
                             "the grid has only those two axes")
        cells[r.variant, r.new_tokens, r.batch] = r.ratio.point
    batches = sorted({r.batch for r in rows})
    keys = dict.fromkeys((r.variant, r.new_tokens) for r in rows)
    body = [[variant, tokens] + [f"{cells[variant, tokens, b]:.1f}x" if (variant, tokens, b) in cells else "-"
                                 for b in batches] for variant, tokens in keys]
    return table(["variant", "new tokens"] + [f"batch {b}" for b in batches], body)


def readme_block(record: dict, loaded: list[tuple[dict, Result | None]], folder_name: str) -> str:
    """folder_name: the sweep's folder under reports/ (publish --name may differ from the sweep's name)."""
    if record["spec"].get("report", "sweep") != "sweep":
        raise ValueError(f"reports/{folder_name} is a {record['spec'].get('report')} sweep, not a curve sweep: "
                         "its points share batch and new tokens, so a grid would show one of them")
    usable, rejected = curves.split(loaded)
    lines = []
    for points in curves.by_model(usable).values():
        lines += [f"{model_title(points)}: steady speed-up over eager generate()", ""] + speedup_grid(points) + [""]
    lines += [f"{line}." for line in models_without_a_valid_point(loaded, usable)]
    wall = record.get("wall") or {}
    runs = sweep.invocations(wall)
    gpus = {run.get("gpus") for run in runs} - {None}  # one count only where every invocation had it
    total = wall_seconds(record)
    seconds = f"{total:.0f} s of points" if total else "no wall time recorded"
    commits = dict.fromkeys(str(commit)[:10] for _, r in loaded if r is not None
                            for commit in [(r.metadata.get("git") or {}).get("commit")] if commit)
    executor = wall.get("executor") or record.get("executor") or "an unrecorded"
    lines.append(f"Sweep `{record['spec'].get('name')}`: {len(loaded)} points, {len(usable)} valid, "
                 f"{len(rejected)} failed or invalid; {executor} executor"
                 + (f" on {gpus.pop()} GPU(s)" if len(gpus) == 1 else "") + f", {seconds}"
                 + (f" over {len(runs)} invocation(s)" if runs else "")
                 + f"; commit(s) {', '.join(commits) or 'not recorded'} (see `reports/{folder_name}/summary.md`).")
    return "\n".join(lines)


def fill_readme(text: str, reports_root) -> str:
    """README text with every `<!-- readme-sweep NAME -->` block rebuilt from reports/NAME/."""
    return fill_blocks(text, "sweep",
                       lambda name: readme_block(*sweep.load(Path(reports_root) / name), folder_name=name))


if __name__ == "__main__":
    readme = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md")
    readme.write_text(fill_readme(readme.read_text(encoding="utf-8"), readme.parent / "reports"), encoding="utf-8")
