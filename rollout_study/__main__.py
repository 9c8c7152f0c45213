"""`python -m rollout_study run [params/NAME.yaml]`: the study and report notebooks in one command.

`python -m rollout_study.bench` stays the benchmark-compatible command line; `python -m rollout_study
bench ...` forwards to it.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from .bench import main as bench_main

        return bench_main(argv[1:])
    from .run import main as run_main

    return run_main(argv)


if __name__ == "__main__":
    sys.exit(main())
