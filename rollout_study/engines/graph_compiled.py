"""`graph-compiled`: the graph engine with its steps compiled by torch.compile, then captured by the study's graphs.

torch.compile fuses the ~1,400 kernels of a decode step into fewer; it runs without CUDA graphs of
its own (mode None, `triton.cudagraphs` off, static shapes), so the capture, the replay and the
refresh policies are exactly the `graph` engine's. What compiling adds:
- Compilation is charged to the `compile` part: before a runner's graphs are captured, each
  compiled step runs outside any graph. Dynamo's own compile callbacks (`CompileWatch`, as
  hf-compile uses) time each compilation in that run (the first time, or a recompile after an
  update broke a guard): that is `compile`, with the torch.compile call that wraps the step (on
  its first use in a process it imports dynamo and inductor, seconds); the rest of the run (the
  compiled kernels running, inductor's first-launch work) is `warmup`. A compile never happens
  inside a capture, and any compile inside the rollout itself is counted in the call notes
  (`compiles_in_rollout`), where it should stay zero.
- Every runner step (prefill, and the decode step of each length bucket) is compiled from its own
  copy of the code object, because dynamo keeps its compiled variants, and counts them against its
  recompile limit, per code object: shared, batch sizes times buckets times engines could reach
  the default limit of 8. `fullgraph=True` makes a graph break or a reached limit raise instead of falling back
  to eager code silently.
- With inductor on CUDA, matrix products (aten.mm) of a few rows against a weight that stays in L2 (a
  decode step's, one row per sequence, and the vocabulary projection of the prefill's last position)
  are written as fused multiply-and-sum reductions (`row_reductions`) instead of cuBLAS's kernels, in
  every dtype; biased projections (addmm) and batched products are left as they are. On the SmolLM2
  shape in FP32 that took summed kernel time from 154 to 105 ms a call, 2.1x under the graph engine's
  226 (reports/probes-h200, probe-gemm).
"""
from __future__ import annotations

import sys
import time
import types

import torch

from ..param_values import COMPILE_BACKENDS
from ..timing import CallClock
from .compile_watch import CompileWatch
from .graph import GraphEngine
from .static_runner import StaticRunner

# Eager FP16 code rounds every intermediate to FP16; inductor's fused kernels keep float32 between
# the ops they fuse, which differs from generate() in the last bit and flips near-tied greedy
# choices. Emulating the casts rounds where eager code does (set per compile, not process-wide).
INDUCTOR_OPTIONS = {"triton.cudagraphs": False, "emulate_precision_casts": True}
# Variants one step's code may hold: each code object serves one shape, so variants come only from
# state a guard reads that an update changes (requires_grad after a reload, adapter state), a few
# per run; dynamo's default is 8, and reaching the limit raises (fullgraph) rather than run eager code.
RECOMPILE_LIMIT = 16
# Matrix products written as reductions: at most this many rows (a decode step at batch <= 16; a prefill
# has batch x prompt rows), and a weight of at most this many values. The reduction's programs read the
# weight once per row, so it must stay in L2 between the rows (H200: 50 MB; 2**22 FP32 values are 16 MiB):
# SmolLM2's vocabulary projection (49,152 x 576) and the 1B shape's MLP stay with cuBLAS.
REDUCTION_MAX_ROWS = 16
REDUCTION_MAX_WEIGHT = 2 ** 22
# Stands for row_reductions' code in inductor's cache key (RowReductionTable): change it with that code.
REDUCTIONS_VERSION = 1


class RowReductionTable(dict):
    """The decomposition table, pickled as what it is made from: torch 2.13 puts the table of a
    compile_fx call into inductor's cache key, and most of its functions cannot be pickled, which
    would bypass the cache (every compile from scratch) instead of keying it."""

    def __reduce__(self):
        return _table_for_key, (REDUCTION_MAX_ROWS, REDUCTION_MAX_WEIGHT, REDUCTIONS_VERSION)


def _table_for_key(rows: int, weight: int, version: int) -> RowReductionTable:
    return row_reductions({"as_reductions": 0, "left_to_inductor": 0})


def row_reductions(seen: dict[str, int]) -> RowReductionTable:
    """Inductor's decomposition table, with aten.mm of a few rows on CUDA as (a[:, :, None] * b[None]).sum(1).

    Inductor fuses that into one reduction kernel, with the RMSNorm or activation before it, as it does
    for one row under coordinate-descent tuning (gpt-fast's batch-1 decode). Computed in FP32
    (pw_cast_for_opmath) and rounded once, as cuBLAS accumulates; the order of the sum is another, so
    parity is checked, never assumed. `seen` counts the products traced, per way.
    """
    from torch._inductor import decomposition

    table = RowReductionTable(decomposition.select_decomp_table())
    aten = torch.ops.aten
    inductors = table.get(aten.mm.default)

    @decomposition.pw_cast_for_opmath
    def reduce(mat1, mat2):
        return (mat1.unsqueeze(2) * mat2.unsqueeze(0)).sum(dim=1)

    def mm(mat1, mat2, *args, **kwargs):
        if not args and not kwargs and mat1.device.type == "cuda" and mat1.dim() == 2 and \
                mat1.shape[0] <= REDUCTION_MAX_ROWS and mat2.numel() <= REDUCTION_MAX_WEIGHT:
            seen["as_reductions"] += 1
            return reduce(mat1, mat2)
        seen["left_to_inductor"] += 1
        return inductors(mat1, mat2, *args, **kwargs) if inductors is not None else NotImplemented

    table[aten.mm.default] = mm
    return table


def inductor_with_row_reductions(seen: dict[str, int]):
    """A torch.compile backend: inductor with the engine's options and `row_reductions`."""

    def backend(gm, example_inputs):
        import torch._functorch.config
        from torch._inductor.compile_fx import compile_fx

        # AOTAutograd's cache keys a compiled graph by the graph dynamo traced and the configs, not by
        # the decomposition table: it would hand this compile one made without the reductions (and
        # one made with them to a later plain inductor compile), untraced. Inductor's own cache keys
        # the graph after decomposition (and on torch 2.13 the table too), so it tells them apart.
        with torch._functorch.config.patch(enable_autograd_cache=False):
            return compile_fx(gm, example_inputs, config_patches=dict(INDUCTOR_OPTIONS),
                              decompositions=row_reductions(seen))

    return backend


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process (any backend)."""
    if "torch._dynamo.utils" not in sys.modules:
        return 0  # not imported yet (seconds): nothing compiled, and importing it here would charge the wrong part
    return sys.modules["torch._dynamo.utils"].counters["stats"]["unique_graphs"]


def own_code(method):
    """The bound method, as a function with a fresh copy of its code object (dynamo caches per code object)."""
    func = method.__func__
    copy = types.FunctionType(func.__code__.replace(), func.__globals__, func.__name__, func.__defaults__,
                              func.__closure__)
    copy.__qualname__, copy.__kwdefaults__ = func.__qualname__, func.__kwdefaults__
    return types.MethodType(copy, method.__self__)


class CompiledStep:
    """One runner step compiled apart; counts the graphs dynamo compiled while running it."""

    def __init__(self, method, backend: str):
        self.method, self.backend = method, backend
        self.fn = None
        self.compiles = 0
        self.matmuls = {"as_reductions": 0, "left_to_inductor": 0}  # traced by inductor (row_reductions)
        self.setup_s = 0.0  # the torch.compile call itself (its first use in a process imports dynamo)

    def __call__(self, *args):
        if self.fn is None:
            # Here, not at construction: the first torch.compile imports dynamo and inductor (seconds),
            # and that belongs to the compile part, not to the runner's allocation.
            begin = time.perf_counter()
            # inductor through its own backend: INDUCTOR_OPTIONS as that backend's config patches, with the reductions
            backend = inductor_with_row_reductions(self.matmuls) if self.backend == "inductor" else self.backend
            self.fn = torch.compile(own_code(self.method), backend=backend, mode=None, fullgraph=True, dynamic=False)
            self.setup_s = time.perf_counter() - begin
        before = compiled_graphs()
        try:
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
                return self.fn(*args)
        finally:
            self.compiles += compiled_graphs() - before


class GraphCompiledEngine(GraphEngine):
    name = "graph-compiled"
    colors = {"recapture": "#9467bd", "reuse": "#17becf", "version-only": "#bcbd22", "unchecked": "#8c564b"}

    def __init__(self, *args, backend: str = "inductor", **kwargs):
        if backend not in COMPILE_BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(COMPILE_BACKENDS)}, got {backend!r}")
        self.backend = backend
        super().__init__(*args, **kwargs)
        self._compile_notes: dict = {}

    @classmethod
    def build(cls, loaded, device, params, policy):
        return cls(loaded.model, device, policy, params.prompt_len, params.max_new_tokens, attn=params.attn,
                   length_bucket=params.length_bucket, steps_per_graph=params.steps_per_graph,
                   backend=params.compile_backend)

    def describe(self) -> dict:
        steps = "compiled (torch.compile), then " if self.use_graphs else "compiled (torch.compile), run eagerly: "
        return {**super().describe(), "steps": steps + ("captured" if self.use_graphs else "no CUDA graph"),
                "compile": {"backend": self.backend, "mode": None, "dynamic": False, "fullgraph": True,
                            "inductor_options": dict(INDUCTOR_OPTIONS) if self.backend == "inductor" else None,
                            "row_reductions": (f"on CUDA, matrix products of at most {REDUCTION_MAX_ROWS} rows and a "
                                               f"weight of at most {REDUCTION_MAX_WEIGHT:,} values as fused reductions"
                                               if self.backend == "inductor" else None),
                            "recompile_limit": RECOMPILE_LIMIT,
                            "cache": "one code object per runner step and length bucket"}}

    def _wrap_step(self, method):
        return CompiledStep(method, self.backend)

    def _before_capture(self, runner: StaticRunner, clock: CallClock) -> None:
        notes = self._compile_notes
        for index in runner.distinct_steps():  # graphs of one bucket share its compiled step
            name, step, _, _ = runner.steps[index]
            watch = CompileWatch(self.device)
            before, set_up, traced, begin = step.compiles, step.setup_s, dict(step.matmuls), clock.now()
            with torch.no_grad(), watch.watching():
                runner.run_uncaptured([index])
            end, new = clock.now(), step.compiles - before
            if step.compiles == 0:
                raise RuntimeError(f"{self.name}: torch.compile compiled nothing for {name} (dynamo disabled?); "
                                   "refusing to run its steps uncompiled under this engine's name")
            compiling = min(watch.seconds["compile"] + step.setup_s - set_up, end - begin)
            clock.add("compile", compiling)
            clock.add("warmup", end - begin - compiling)
            if new:
                for way, count in (step.matmuls.items() if notes["matmuls"] is not None else ()):  # by these compiles
                    notes["matmuls"][way] += count - traced[way]
                notes["graphs_compiled"] += new
                notes["recompiled" if before else "compiled"].append(f"{name} (batch {runner.out.shape[0]})")
            notes["compile_runs"] += 1

    def call_notes(self) -> dict:
        return {**super().call_notes(), "compile": dict(self._compile_notes)}

    def __call__(self, batches, clock: CallClock):
        self._compile_notes = {"graphs_compiled": 0, "compiled": [], "recompiled": [], "compile_runs": 0,
                               # aten.mm products inductor traced, per way (row_reductions); None: no inductor
                               "matmuls": ({"as_reductions": 0, "left_to_inductor": 0}
                                           if self.backend == "inductor" else None),
                               "compiles_in_rollout": 0}
        before = compiled_graphs()
        try:
            return super().__call__(batches, clock)
        finally:
            notes = self._compile_notes
            notes["compiles_in_rollout"] = compiled_graphs() - before - notes["graphs_compiled"]
