"""`python -m rollout_study ...`: see rollout_study/cli.py."""
import sys

from .cli import main

sys.exit(main())
