"""rollout-study: what CUDA-graph rollouts cost when generation alternates with training updates."""
import warnings

# Libraries the study imports load tqdm.auto, which in a notebook kernel without ipywidgets warns
# "IProgress not found"; rendered HTML shows that as a red box although no progress bar is used.
warnings.filterwarnings("ignore", message="IProgress not found")
