"""The original benchmark's command line: `python -m rollout_study.bench --requests 8 ...`.

The same as `python -m rollout_study bench ...` (rollout_study/cli.py), kept so that the original
benchmark's commands run unchanged.
"""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
