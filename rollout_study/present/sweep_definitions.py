"""The sweep report's definitions: what each of its numbers is and how a verdict reads it (present/sweep.py)."""
from __future__ import annotations

from .. import effects
from .. import sweep_curves as curves
from . import policy_gaps
from ..stats import WHOLE_RANGE


def definitions() -> list[str]:
    """The report's definitions, built when read: the margin is the constant's value at that time."""
    return [
        "steady: the cycle-0 steady phase (before any update); speed-up: eager generate()'s steady median over "
        "the variant's, with its 95% bootstrap interval, both from the same point (where a sweep runs its engines "
        "in groups, each group's point runs eager, and the host's line says how far their eager medians differ; a "
        "variant's rows at one place come from the first valid point that ran it)",
        "ms per token: steady median / (requests x new tokens); ms per decode step: steady median / (batches per "
        "call x new tokens), one step of one batch with the prefill spread over the steps",
        "capture: the capture part of the variant's first call; peak: peak allocated during it minus allocated at "
        "its start; kept: allocated after it minus at its start (static cache, buffers, graph pools); reserved "
        "growth: reserved after it minus after the call before it. Kept counts cuBLAS's workspace (one a stream, "
        "32 MiB on Hopper) where the call frees one an earlier call left or makes one again: the graph engines "
        "clear it before capturing, torch's CUDA graph trees (hf-compile) around each recording, so the first "
        "graph variant of a point and hf-compile read about one workspace under what they keep of their own "
        "(below zero where that is small), and a variant that runs after a capture and makes one again "
        "(hf-continuous after graph) about one over. Captures: the graphs the engine counts (the graph engines their "
        "own, hf-compile torch's CUDA graph trees' recordings); hf-continuous counts none, and its capture ms is its "
        "manager's warm-up, which captures graphs at the largest shapes",
        "first after update: median over real updates of the first call after one; steady after: the median steady "
        "call after real updates (not cycle 0's); break-even: rollouts per update U from which (or up to which, the "
        "figure's open triangles) first + (U-1) x steady after is no dearer than the baseline's; two steady states "
        "differ only when the 95% interval of their ratio excludes 1, and two policies of one engine (reuse and "
        f"recapture: the same kernels replayed) only beyond {effects.STEADY_MARGIN:.0%} either way as well (they "
        "differ by a few percent in one run), else the first calls alone decide (no 'up to U' drawn from noise; a "
        "first call not dearer is the figure's open square at U=1), and "
        "where those are within their interval too the verdict is 'no difference'; steady / baseline's: the "
        "candidate's steady median after the update over the baseline's, the gap the verdict read",
        WHOLE_RANGE,
        "recapture over reuse: " + policy_gaps.SWEEP_NOTE,
        "in both orders: " + policy_gaps.ORDER_NOTE,
        "growth: least squares steady ms = a + b x new tokens per variant and batch (slope b in ms per new token, "
        "R^2 of the fit, given from three new-token counts on: through two a line always fits)",
        f"crossover: per variant and new tokens, the smallest batch with a valid point whose speed-up is under "
        f"{curves.CROSSOVER}x (the point estimate); where a larger batch's is not under it, every larger batch's is "
        "listed: the speed-up need not fall steadily with the batch (eager generate(), among other things, runs at the "
        "host's pace: see each point's host); where the crossing's 95% interval includes "
        f"{curves.CROSSOVER}x, the text gives it: under {curves.CROSSOVER}x by the point estimate alone; a batch "
        f"before the crossing (every batch, for a 'none') whose speed-up is at or over {curves.CROSSOVER}x and whose "
        f"interval includes {curves.CROSSOVER}x is named with its interval: not under by the point estimate alone. "
        "Batches after the crossing are listed by the point estimate; the speed-up table gives every point's interval",
        "only valid points are plotted or tabulated; failed and invalid points are listed apart. Invalid: a call's "
        "tokens, mask or response offsets differ from generate()'s; the report names the first difference, for a "
        "token with the reference's top-2 logit margin there (near zero: a near-tie that the engine's fused or "
        "reordered arithmetic flips; the point is still invalid). A resume with the same code on the same GPU keeps "
        "a point whose measured calls alone lost parity: running it until it passes would pick the results",
        "setting: where a sweep varied a parameter besides the model, batch, requests, new tokens and the engines' "
        "groups (length_bucket, say), each value (or combination) is a setting with its own section; its model's "
        "settings side by side: the steady median at the first setting with a valid point (in the sweep file's "
        "order) over each other setting's at the same variant and place, with its 95% bootstrap interval (over 1: that "
        "setting is faster). Each side comes from its own point, so the ratio carries how far two points moved run to "
        "run: eager generate()'s ratio in the same two points, beside it, says how far where eager ignores the setting "
        "(length_bucket); the models side by side take each model at its first setting",
        "wall time: per invocation, from its start to its last finished point; a point cut off when a device call "
        "ended (it runs again on resume) and a machine's start-up before an invocation are in no row, so a sweep "
        "spanning calls held its device longer than the sum",
    ]
