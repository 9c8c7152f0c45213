"""The static-cache rollout shared by the graph engines: buffers, step functions, capture and replay.

One `StaticRunner` per (batch, dtype, device) owns the static buffers of that shape: the KV cache,
the prompt, the key-validity mask, the next token, positions, the write position and the output
tokens. Its graphs are the prefill of the fixed prompt shape and the decode step. Everything that
changes between steps (the greedy choice, positions, mask, write position, output column) is
updated on the device inside the graphs, so a rollout is: copy the prompt in, replay prefill,
replay a decode graph `max_new_tokens - 1` times. Without CUDA the same step functions run eagerly.

Length buckets (`length_bucket` > 0): a single decode graph must attend over every slot of the
cache, because a graph cannot change its shapes; decode step s needs only the first
`prompt_len + s` keys. So the runner captures one decode graph per bucket of cache length, each
reading keys, values and the key-validity mask up to its limit, and the host, which knows the
step index, replays the bucket's graph for each step. Prefill then reads the prompt's keys only.

Steps per graph (`steps_per_graph`): a replay has a fixed cost on the device between graphs
(measured as the gap between decode replays), which matters once compiled steps make each step
short. A decode graph may hold several consecutive steps of its bucket (0: every step of the
bucket), so a rollout replays fewer, longer graphs; the steps and their order are unchanged,
only where the host hands over to the device. A bucket whose step count is not a multiple gets
one shorter graph for the rest.
"""
from __future__ import annotations

import time

import torch

from .. import masks


class StaticKVCache:
    """Preallocated keys and values; `write_positions` is a device tensor read inside the graph.

    Duck-types the one method Hugging Face attention layers call on a cache (`update`), so the
    addresses are ours and do not depend on the library's cache internals. `limit` is how many
    key positions the attention reads; a step sets it before its forward, so a graph captured for
    one bucket bakes in that bucket's slices.
    """

    def __init__(self, layers: int, batch: int, kv_heads: int, length: int, head_dim: int, dtype, device):
        shape = (batch, kv_heads, length, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.write_positions: torch.Tensor | None = None
        self.limit = length

    def clear_from(self, position: int) -> None:
        # An earlier rollout may have left inf (an FP16 overflow) in a slot this one masks out;
        # masked attention gives it weight zero, and zero times inf is NaN. Slots are cleared.
        for tensor in (*self.keys, *self.values):
            tensor[:, :, position:].zero_()

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.keys[layer_idx].index_copy_(2, self.write_positions, key_states)
        self.values[layer_idx].index_copy_(2, self.write_positions, value_states)
        return self.keys[layer_idx][:, :, : self.limit], self.values[layer_idx][:, :, : self.limit]


def decode_limits(prompt_len: int, new_tokens: int, length_bucket: int) -> list[int]:
    """Keys read by each decode graph: one limit per bucket that some decode step falls in.

    Bucket k holds min((k + 1) * length_bucket, prompt_len + new_tokens) keys; decode step s
    (s = 1 .. new_tokens - 1) attends prompt_len + s keys, so the first bucket is the one holding
    prompt_len + 1 and the last the one holding prompt_len + new_tokens - 1.
    """
    length = prompt_len + new_tokens
    if new_tokens < 2:
        return []
    if not length_bucket:
        return [length]
    first, last = prompt_len // length_bucket, (length - 2) // length_bucket
    return [min((k + 1) * length_bucket, length) for k in range(first, last + 1)]


def step_buckets(prompt_len: int, new_tokens: int, length_bucket: int) -> list[int]:
    """For decode steps 1 .. new_tokens - 1, the index (into `decode_limits`) of the graph that serves it."""
    if not length_bucket:
        return [0] * max(0, new_tokens - 1)
    first = prompt_len // length_bucket
    return [(prompt_len + s - 1) // length_bucket - first for s in range(1, new_tokens)]


def replay_plan(prompt_len: int, new_tokens: int, length_bucket: int,
                steps_per_graph: int = 1) -> list[tuple[int, int]]:
    """The decode replays of one rollout, in order: (bucket index, steps in that replay).

    Each bucket's steps are cut into runs of `steps_per_graph` (0: the whole bucket), the last run
    of a bucket holding what is left; every decode step is in exactly one replay.
    """
    plan = []
    served = step_buckets(prompt_len, new_tokens, length_bucket)
    for bucket in sorted(set(served)):
        count = served.count(bucket)
        size = count if steps_per_graph == 0 else steps_per_graph
        plan += [(bucket, min(size, count - done)) for done in range(0, count, size)]
    return plan


def graph_name(limit: int, steps: int) -> str:
    return f"decode[0:{limit}]" + (f"x{steps}" if steps > 1 else "")


def bucket_layout(prompt_len: int, new_tokens: int, length_bucket: int, steps_per_graph: int = 1) -> dict:
    """Keys the prefill reads, and per decode graph its keys, the steps one replay runs and the decode
    steps it serves (first, last; the first generated token, from prefill, is step 0)."""
    limits = decode_limits(prompt_len, new_tokens, length_bucket)
    graphs: dict[tuple[int, int], list[int]] = {}
    step = 1
    for bucket, count in replay_plan(prompt_len, new_tokens, length_bucket, steps_per_graph):
        graphs.setdefault((bucket, count), []).extend(range(step, step + count))
        step += count
    decode = [{"graph": graph_name(limits[bucket], count), "keys": limits[bucket], "steps_per_replay": count,
               "steps": [served[0], served[-1]]} for (bucket, count), served in graphs.items()]
    return {"length_bucket": length_bucket, "steps_per_graph": steps_per_graph,
            "prefill_keys": prompt_len if length_bucket else prompt_len + new_tokens, "decode_graphs": decode}


_SIDE_STREAMS: dict = {}


def side_stream(device) -> "torch.cuda.Stream":
    # One warmup stream per device for every runner: cuBLAS keeps a workspace per stream
    # (32 MiB on Hopper), so a fresh stream per capture would grow memory with each engine.
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


def own_cublas_workspace() -> None:
    """Drop cuBLAS's cached workspaces, so the capture that follows allocates its own in the graph's pool.

    A captured GEMM keeps the address of the workspace cuBLAS had for the capture stream. Allocated
    by a warmup, in the default pool, that workspace is not the graph's: torch.compile's CUDA graph
    trees (hf-compile) free every workspace before and after each recording, a later empty_cache
    (continuous batching's reset, or a capture's) releases it, and a replay then writes to unmapped
    memory or, where the memory was reused, into another tensor: the cause of the illegal address on
    the H200 at batch 64 (the 1B shape and SmolLM2), confirmed there
    (reports/probes-h200/README.md). Allocated during the capture, it is a block of the graph's
    private pool, which stays mapped as long as the graph lives, whoever frees the workspace later.
    PyTorch's CUDA graph trees clear the workspaces before recording for the same reason, and its
    maintainers advise the same to other capturers (pytorch/pytorch#192061, #192871); graphs that
    share a capture stream otherwise share its workspace (#193402).
    """
    torch._C._cuda_clearCublasWorkspaces()


def _memory(device) -> tuple[int, int]:
    stats = torch.cuda.memory_stats(device)
    return stats.get("reserved_bytes.all.current", 0), stats.get("allocated_bytes.all.current", 0)


class StaticRunner:
    """The buffers and graphs of one batch shape. `wrap` turns each step method into what is run
    and captured (the compiled engine compiles it here, once per key limit); `steps` lists
    (graph name, callable, key limit, steps per replay), one entry per graph."""

    def __init__(self, model, batch: int, prompt_len: int, new_tokens: int, device, attn: str,
                 length_bucket: int = 0, wrap=None, steps_per_graph: int = 1):
        config = model.config
        dtype = next(model.parameters()).dtype
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        length = prompt_len + new_tokens
        self.model, self.batch_size, self.prompt_len, self.new_tokens = model, batch, prompt_len, new_tokens
        self.attn, self.dtype = attn, dtype
        self.cache = StaticKVCache(config.num_hidden_layers, batch, kv_heads, length, head_dim, dtype, device)
        long = dict(dtype=torch.long, device=device)
        self.input_ids = torch.zeros((batch, prompt_len), **long)
        self.prompt_mask = torch.zeros((batch, prompt_len), **long)
        self.key_valid = torch.zeros((batch, length), dtype=torch.bool, device=device)
        self.next_token = torch.zeros((batch, 1), **long)
        self.position = torch.zeros((batch, 1), **long)
        self.prefill_positions = torch.arange(prompt_len, **long)
        self.write_position = torch.zeros((1,), **long)
        self.step = torch.zeros((1,), **long)
        self.out = torch.zeros((batch, new_tokens), **long)
        wrap = wrap or (lambda method: method)
        # Unbucketed, prefill reads the whole cache as it always did (the masked tail included).
        self.steps = [("prefill", wrap(self.prefill_step), prompt_len if length_bucket else length, 1)]
        limits = decode_limits(prompt_len, new_tokens, length_bucket)
        decode_fns = [wrap(self.decode_step) for _ in limits]  # one per bucket, shared by its graphs
        index_of: dict[tuple[int, int], int] = {}
        self.step_graphs = []  # the index into `steps` of each decode replay, in order
        for bucket, count in replay_plan(prompt_len, new_tokens, length_bucket, steps_per_graph):
            if (bucket, count) not in index_of:
                index_of[bucket, count] = len(self.steps)
                self.steps.append((graph_name(limits[bucket], count), decode_fns[bucket], limits[bucket], count))
            self.step_graphs.append(index_of[bucket, count])
        self.graphs: tuple | None = None  # (prefill, decode graph of each (bucket, steps per replay)), in `steps` order
        self.capture_notes: list[dict] = []  # per graph of the latest capture: time and pool growth
        self.warmed = False
        self.ready = False  # steps prepared (compiled, captured) for the weights now; dropped with the graphs

    def _attention_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        return masks.for_attention(allowed, self.attn, self.dtype)

    def _logits(self, input_ids, mask, positions) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        # generate() takes the greedy choice on float32 logits; the cast keeps ties resolved alike.
        return out.logits[:, -1, :].float()

    def prefill_step(self, limit: int) -> None:
        mask2d = self.prompt_mask
        self.key_valid.zero_()
        self.key_valid[:, : self.prompt_len] = mask2d.bool()
        allowed = masks.allowed_keys(self.key_valid[:, :limit], self.prompt_len)
        positions = masks.positions(mask2d)  # as generate() does
        self.cache.clear_from(self.prompt_len)
        self.cache.write_positions = self.prefill_positions
        self.cache.limit = limit
        token = self._logits(self.input_ids, self._attention_mask(allowed), positions).argmax(-1)
        self.out[:, 0] = token
        self.key_valid[:, self.prompt_len] = True
        self.next_token.copy_(token[:, None])
        self.position.copy_(positions[:, -1:] + 1)
        self.write_position.fill_(self.prompt_len)
        self.step.fill_(1)

    def decode_step(self, limit: int) -> None:
        self.cache.write_positions = self.write_position
        self.cache.limit = limit
        allowed = self.key_valid[:, None, None, :limit]
        token = self._logits(self.next_token, self._attention_mask(allowed), self.position).argmax(-1)
        self.out.index_copy_(1, self.step, token[:, None])
        self.key_valid.index_fill_(1, self.write_position + 1, True)
        self.next_token.copy_(token[:, None])
        self.position.add_(1)
        self.write_position.add_(1)
        self.step.add_(1)

    def distinct_steps(self) -> list[int]:
        """The first index in `steps` of each step function: graphs of one bucket share theirs."""
        seen, first = set(), []
        for index, (_, fn, _, _) in enumerate(self.steps):
            if id(fn) not in seen:
                seen.add(id(fn))
                first.append(index)
        return first

    def run_uncaptured(self, indices=None) -> None:
        """Run the step function of each of `steps[indices]` once, outside any graph, on the warmup
        stream where there is CUDA (default: every distinct step function).

        The steps advance the buffers past their valid range only harmlessly: the next prefill
        resets every buffer a rollout reads.
        """
        indices = self.distinct_steps() if indices is None else indices
        if self.input_ids.device.type != "cuda":
            for index in indices:
                self._run(index, once=True)
            return
        stream = side_stream(self.input_ids.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for index in indices:
                self._run(index, once=True)
        torch.cuda.current_stream().wait_stream(stream)

    def _run(self, index: int, once: bool = False) -> None:
        """What graph `index` holds, run eagerly: its step function, once per step it covers (or once)."""
        _, fn, limit, repeats = self.steps[index]
        for _ in range(1 if once else repeats):
            fn(limit)

    def warmup(self) -> None:
        # Run each step once on a side stream before capture, as PyTorch asks, so lazy
        # initialization (handles, workspaces, autotuning) happens outside the graph.
        self.run_uncaptured()
        self.warmed = True

    def capture(self, pool) -> int:
        # The warmup's stream: a capture on PyTorch's default capture stream would set up a
        # second cuBLAS workspace there and charge that lazy set-up to capture.
        device = self.input_ids.device
        stream = side_stream(device)
        graphs, self.capture_notes = [], []
        own_cublas_workspace()  # the first capture's pool growth includes it: it is memory the graphs hold
        for index, (name, _, limit, repeats) in enumerate(self.steps):
            # The capture empties the allocator's cache as it begins; emptied here first, the
            # reserved-memory difference is what the graph pool grew by.
            torch.cuda.empty_cache()
            reserved, allocated = _memory(device)
            begin = time.perf_counter()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                self._run(index)
            torch.cuda.synchronize(device)
            seconds = time.perf_counter() - begin
            now_reserved, now_allocated = _memory(device)
            graphs.append(graph)
            self.capture_notes.append(self.capture_note(index, seconds, now_reserved - reserved,
                                                        now_allocated - allocated))
        # And after: no cached workspace may point into this pool once the capture is done. Streams come
        # from a pool torch recycles, so another library's capture stream can be this one, and its graphs
        # would keep this pool's block after this engine drops its graphs and the pool is released.
        own_cublas_workspace()
        self.graphs = tuple(graphs)
        return len(graphs)

    def capture_note(self, index: int, seconds: float, pool_bytes: int, allocated_bytes: int) -> dict:
        """What the call's notes keep of capturing step function `index` (the report's graphs-captured rows)."""
        name, _, limit, repeats = self.steps[index]
        return {"batch": self.batch_size, "graph": name, "keys": limit, "steps": repeats, "capture_ms": seconds * 1e3,
                "pool_bytes": pool_bytes, "allocated_bytes": allocated_bytes}

    def drop_graphs(self) -> None:
        for graph in self.graphs or ():
            graph.reset()
        self.graphs = None
        self.ready = False

    def load(self, batch) -> None:
        self.input_ids.copy_(batch.input_ids, non_blocking=True)
        self.prompt_mask.copy_(batch.attention_mask, non_blocking=True)

    def prefill(self) -> None:
        if self.graphs is not None:
            self.graphs[0].replay()
        else:
            self._run(0)

    def decode(self) -> None:
        if self.graphs is not None:
            graphs = self.graphs
            for index in self.step_graphs:
                graphs[index].replay()
        else:
            for index in self.step_graphs:
                self._run(index)
