"""Fixed prompts (from a seed, or chat text), left padding, batches.

Every batch is padded on the left to the same `prompt_len`, so one prompt shape serves every
batch of the same size and the captured prefill graph is reused. True lengths vary inside each
batch, so attention masks and position ids matter for parity.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .param_values import ParameterError

# Varied on purpose: short and long, factual and open, so true lengths differ after templating.
CHAT_PROMPTS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about the sea.",
    "Explain in one sentence why the sky is blue.",
    "What is 12 times 7?",
    "Give me a short tip for learning a new language.",
    "Translate 'good morning' into Spanish.",
    "List two uses of a paperclip besides holding paper.",
    "Who wrote Romeo and Juliet?",
    "Describe a cat in five words.",
)


@dataclass
class Batch:
    index: int
    request_ids: list[int]
    input_ids: torch.Tensor  # [b, prompt_len], left padded, CPU
    attention_mask: torch.Tensor  # [b, prompt_len], 0 on padding, CPU
    true_lengths: list[int]

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class Workload:
    batches: list[Batch]
    pad_token_id: int
    source: str  # "random" or "chat"
    texts: list[str] | None = None

    @property
    def prompt_len(self) -> int:
        return int(self.batches[0].input_ids.shape[1])

    @property
    def requests(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def true_lengths(self) -> list[int]:
        return [n for b in self.batches for n in b.true_lengths]

    def describe(self) -> dict:
        return {
            "prompt_source": self.source,
            "true_prompt_lengths": self.true_lengths,
            "batch_sizes": [b.size for b in self.batches],
            "pad_token_id": self.pad_token_id,
            "prompt_texts": self.texts,
        }


def _left_pad(rows: list[list[int]], prompt_len: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(rows), prompt_len), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), prompt_len), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, prompt_len - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, prompt_len - len(row):] = 1
    return ids, mask


def _batched(rows: list[list[int]], batch_size: int, prompt_len: int, pad_id: int) -> list[Batch]:
    batches = []
    for index, start in enumerate(range(0, len(rows), batch_size)):
        chunk = rows[start:start + batch_size]
        ids, mask = _left_pad(chunk, prompt_len, pad_id)
        batches.append(Batch(index, list(range(start, start + len(chunk))), ids, mask, [len(r) for r in chunk]))
    return batches


def random_lengths(requests: int, batch_size: int, prompt_len: int, generator: torch.Generator) -> list[int]:
    """True lengths drawn in [ceil(prompt_len/2), prompt_len]; each batch of two or more has padding and differing
    lengths: where its draws were all equal its first row is one shorter (one under the floor where they were drawn
    at it; 2 where they were 1). Seeded workloads of published runs depend on this exact sequence of draws."""
    low = max(1, (prompt_len + 1) // 2)
    lengths = torch.randint(low, prompt_len + 1, (requests,), generator=generator).tolist()
    if prompt_len > 1:
        for start in range(0, requests, batch_size):
            chunk = lengths[start:start + batch_size]
            # differing lengths leave the shortest under prompt_len, so every batch of two has padding
            if len(chunk) > 1 and len(set(chunk)) == 1:
                lengths[start] = max(1, chunk[0] - 1) if chunk[0] > 1 else 2
    return lengths


def random_workload(requests: int, batch_size: int, prompt_len: int,
                    vocab: int, seed: int, pad_token_id: int = 0) -> Workload:
    generator = torch.Generator().manual_seed(seed)
    lengths = random_lengths(requests, batch_size, prompt_len, generator)
    rows = []
    for n in lengths:
        # Token 0 is the pad id of the synthetic model; prompts never contain it.
        rows.append(torch.randint(1, vocab, (n,), generator=generator).tolist())
    return Workload(_batched(rows, batch_size, prompt_len, pad_token_id), pad_token_id, "random")


def chat_rows(tokenizer, requests: int, prompts: tuple[str, ...] = CHAT_PROMPTS) -> tuple[list[str], list[list[int]]]:
    """The request texts and their token ids through the chat template (what generate() sees)."""
    texts = [prompts[i % len(prompts)] for i in range(requests)]
    rows = []
    for text in texts:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        rows.append(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return texts, rows


def check_chat_prompt_len(prompt_len: int | None, longest: int) -> int:
    """prompt_len for chat prompts: None fits the longest; an explicit one must hold it."""
    if prompt_len is None:
        return longest
    if longest > prompt_len:
        raise ParameterError(f"prompt_len must be >= {longest} for the chat prompts (the longest renders to "
                             f"{longest} tokens), or auto to fit them; got {prompt_len}")
    return prompt_len


def chat_workload(tokenizer, requests: int, batch_size: int, prompt_len: int | None,
                  pad_token_id: int, prompts: tuple[str, ...] = CHAT_PROMPTS) -> Workload:
    texts, rows = chat_rows(tokenizer, requests, prompts)
    prompt_len = check_chat_prompt_len(prompt_len, max(len(r) for r in rows))
    return Workload(_batched(rows, batch_size, prompt_len, pad_token_id), pad_token_id, "chat", texts)
