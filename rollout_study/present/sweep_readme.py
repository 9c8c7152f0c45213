"""The README's block for a published curve sweep, rebuilt from its raw points: for one model, the steady
speed-up over generate() at every batch and new-token count, a grid per setting where the sweep varied more
(sweep_settings.py: then also for two or more models); for two or more without settings (the whole sweep, whose
models each have their own block from their subsets), one row per variant and a column per model with the range
of its speed-ups; then the points repeated alone, and a line on what ran where. The test that the README's block
is what this renders keeps hand-typed figures out of it.

Rewrite the README's blocks after publishing: python -m rollout_study.present.sweep_readme README.md
"""
from __future__ import annotations

import sys
from pathlib import Path

from .. import repeats, sweep
from .. import sweep_curves as curves
from ..result import Result
from . import sweep_repeats, sweep_scale
from .markdown import table
from .sweep import models_without_a_valid_point, wall_seconds
from .sweep_panels import model_title
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


def models_grid(models: dict) -> list[str]:
    """One row per variant, one column per model (by parameter count, named as in the report's side-by-side
    section): the lowest and highest steady speed-up over generate() among the model's valid points, and how
    many of those points are under 1.5x (at any batch and length: not the crossover, the smallest such batch), and
    of those how many only by the point estimate (their 95% interval includes 1.5x); '-' where no valid point of the
    model gives the variant a speed-up."""
    keys = sweep_scale.ordered(models)
    per_model = {key: curves.speedups(models[key]) for key in keys}
    variants = sorted({r.variant for rows in per_model.values() for r in rows}, key=curves.variant_rank)
    body = []
    for variant in variants:
        cells = []
        for key in keys:
            mine = [r.ratio for r in per_model[key] if r.variant == variant]
            ratios = [r.point for r in mine]
            under = [r for r in mine if r.point < curves.CROSSOVER]
            # under by the point estimate alone: the interval includes the threshold (as the crossover says)
            alone = sum(r.contains(curves.CROSSOVER) for r in under)
            cells.append(f"{min(ratios):.2f}x to {max(ratios):.2f}x ({len(under)} of {len(ratios)} points under "
                         f"{curves.CROSSOVER}x" + (f", {alone} by the point estimate alone" if alone else "") + ")"
                         if ratios else "-")
        body.append([variant] + cells)
    return table(["variant"] + [sweep_scale.short_name(key, models[key]) for key in keys], body)


def readme_block(record: dict, loaded: list[tuple[dict, Result | None]], folder_name: str, folder=None) -> str:
    """folder_name: the sweep's folder under reports/ (publish --name may differ from the sweep's name); folder:
    where it is, to read its points repeated alone (none: no repeats line)."""
    if record["spec"].get("report", "sweep") != "sweep":
        raise ValueError(f"reports/{folder_name} is a {record['spec'].get('report')} sweep, not a curve sweep: "
                         "its points share batch and new tokens, so a grid would show one of them")
    usable, rejected = curves.split(loaded)
    models, sections = curves.by_model(usable), curves.by_section(usable)
    lines = []
    if len(models) >= 2 and len(sections) == len(models):  # a model's range over two settings would mix them
        machines = ", ".join(dict.fromkeys(p.result.machine for points in models.values() for p in points))
        lines += [f"Steady speed-up over eager generate() per model, on {machines}, lowest to highest over its valid "
                  "points (per batch and new-token count: the report's section of each model)", ""]
        lines += models_grid(models) + [""]
    else:
        for points in sections.values():
            lines += [f"{model_title(points)}: steady speed-up over eager generate()", ""]
            lines += speedup_grid(points) + [""]
    lines += [f"{line}." for line in models_without_a_valid_point(loaded, usable)]
    if record.get("repeats") and folder is not None:
        verdicts = repeats.verdicts(loaded, repeats.load(folder, record))
        line = sweep_repeats.answer_line(record, verdicts)
        lines.append(f"{line[0].upper()}{line[1:]}.")
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
    def render(name: str) -> str:
        folder = Path(reports_root) / name
        return readme_block(*sweep.load(folder), folder_name=name, folder=folder)
    return fill_blocks(text, "sweep", render)


if __name__ == "__main__":
    readme = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md")
    readme.write_text(fill_readme(readme.read_text(encoding="utf-8"), readme.parent / "reports"), encoding="utf-8")
