"""The progress bar of a study's calls (tqdm on standard error, off with --quiet)."""
from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="rollouts", unit="call", file=sys.stderr, leave=False)

    def step(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
