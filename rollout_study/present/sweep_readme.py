"""The README's block for a published curve sweep, rebuilt from its raw points: per model, the steady
speed-up over generate() at every batch and new-token count, and a line on what ran where. The test
that the README's block is what this renders keeps hand-typed figures out of it."""
from __future__ import annotations

import re
from pathlib import Path

from .. import sweep_curves as curves
from ..result import Result
from .markdown import table
from .sweep_figures import model_title

BLOCK = re.compile(r"<!-- readme-sweep (\S+) -->\n.*?<!-- end readme-sweep -->", re.S)


def speedup_grid(points: list[curves.Point]) -> list[str]:
    """One row per variant and new-token count, one column per batch: eager's steady median over the
    variant's (x), '-' where no valid point gives it."""
    rows = curves.speedups(points)
    batches = sorted({r.batch for r in rows})
    cells = {(r.variant, r.new_tokens, r.batch): r.ratio.point for r in rows}
    keys = dict.fromkeys((r.variant, r.new_tokens) for r in rows)
    body = [[variant, tokens] + [f"{cells[variant, tokens, b]:.1f}x" if (variant, tokens, b) in cells else "-"
                                 for b in batches] for variant, tokens in keys]
    return table(["variant", "new tokens"] + [f"batch {b}" for b in batches], body)


def readme_block(record: dict, loaded: list[tuple[dict, Result | None]]) -> str:
    usable, rejected = curves.split(loaded)
    wall = record.get("wall") or {}
    seconds = wall.get("total_seconds", wall.get("seconds")) or 0
    sessions = len(wall.get("earlier") or []) + 1
    commits = sorted({str((r.metadata.get("git") or {}).get("commit"))[:10] for _, r in loaded if r is not None})
    lines = []
    for points in curves.by_model(usable).values():
        lines += [f"{model_title(points)}: steady speed-up over eager generate()", ""] + speedup_grid(points) + [""]
    lines.append(f"Sweep `{record['spec'].get('name')}`: {len(loaded)} points, {len(usable)} valid, "
                 f"{len(rejected)} failed or invalid; {wall.get('executor', record.get('executor'))} executor on "
                 f"{wall.get('gpus', '-')} GPU(s), {seconds:.0f} s of points over {sessions} invocation(s); "
                 f"commit(s) {', '.join(commits)} (see `reports/{record['spec'].get('name')}/summary.md`).")
    return "\n".join(lines)


def fill_readme(text: str, reports_root) -> str:
    """README text with every `<!-- readme-sweep NAME -->` block rebuilt from reports/NAME/."""
    from .. import sweep

    def block(match):
        body = readme_block(*sweep.load(Path(reports_root) / match.group(1)))
        return f"<!-- readme-sweep {match.group(1)} -->\n{body}\n<!-- end readme-sweep -->"

    return BLOCK.sub(block, text)
