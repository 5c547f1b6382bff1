"""What ``env.json`` records: package versions, threads, device, git commit, command line."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "actlab", "torch", "numpy", "scipy", "pandas", "matplotlib", "click", "tqdm",
    "scikit-learn", "safetensors", "transformers", "pyarrow", "ray", "tensorboard", "mlflow-skinny",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when not installed)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(start: Path | None = None) -> dict[str, Any] | None:
    """Commit hash and dirty flag of the git checkout holding actlab, or None outside git."""
    folder = start or Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=folder, capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


def environment(device: str, command: list[str] | None = None) -> dict[str, Any]:
    """The content of ``env.json``."""
    import torch

    from actlab.activations import native
    from actlab.device import precision_flags

    info: dict[str, Any] = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command if command is not None else list(sys.argv),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "device": device,
        "cuda_available": torch.cuda.is_available(),
        "packages": package_versions(),
        "git": git_commit(),
        # Opt-in C++ kernels change results only by rounding, but a reader should know.
        "native_kernels": native.requested_by_environment(),
    }
    info["precision"] = precision_flags()
    if device.startswith("cuda") and torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(torch.device(device))
        info["cuda_version"] = torch.version.cuda
    return info
