"""What the fork server (forkserver.py) imports once for all its children. Imports only: never CUDA."""
import os

# Before anything may ask torch.cuda.is_available(): NVML answers it, and the CUDA driver stays unset here
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import torch  # noqa: E402,F401
from transformers import LlamaForCausalLM  # noqa: E402,F401

from . import models, protocol  # noqa: E402,F401
