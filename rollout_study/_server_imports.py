"""What the fork server (forkserver.py) imports once for all its children. Imports only: never CUDA."""
import os

# The environment the server started with, before its imports set variables of their own (torch sets
# TORCHINDUCTOR_CACHE_DIR): what a child's caller must match (forkserver._child)
STARTED_WITH = dict(os.environ)
# Before anything may ask torch.cuda.is_available(): NVML answers it, and the CUDA driver stays unset here
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # a caller's 0 must not win here

import torch  # noqa: E402,F401
from transformers import LlamaForCausalLM  # noqa: E402,F401

from . import models, protocol  # noqa: E402,F401
