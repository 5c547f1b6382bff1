"""Opt-in C++ kernels that make ``shift=`` and ``adaptive`` cost what the plain activation costs.

In eager PyTorch, ``f(x) - b`` is two kernels: ``f`` writes its output, then the
subtraction reads and writes it again. On CPU these elementwise ops are bound by memory
traffic, so the extra pass costs ~25% of a ReLU's forward+backward (``adaptive`` pays two
more passes forward and two backward). The kernels in ``csrc/shift_kernels.cpp`` compute
``f(x) - b``, ``f(x) - mean_row f(x)`` and the centred backward in one pass each, with
ATen's own vector types, for relu, leaky_relu, gelu (erf form) and silu.

They are compiled on first use with :func:`torch.utils.cpp_extension.load` (a C++
compiler and ``ninja`` are needed; about 40 s once, then cached in torch's extension
directory) and used only when enabled::

    import actlab.activations.native as native
    native.enable()                       # or ACTLAB_NATIVE_KERNELS=1 in the environment
    actlab.activation("relu:shift=theory")(x)   # now one pass forward

If the build fails, :func:`enable` returns ``False``, warns once with the reason, and
everything keeps using the ATen path. Results agree with the ATen path to rounding (exactly
for relu and leaky_relu).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

ENV_VAR = "ACTLAB_NATIVE_KERNELS"
SOURCE = Path(__file__).with_name("csrc") / "shift_kernels.cpp"
# Order-statistic kernels (Percentile Centering, Top-K): their own extension.
SELECTION_SOURCE = SOURCE.parent / "selection.cpp"
# The kernel numbers of csrc/activation_functors.h; every extension exports its table
# (``kinds()``) and load_extension checks it against this one.
KINDS = {"relu": 0, "leaky_relu": 1, "gelu": 2, "silu": 3, "sigmoid": 4, "tanh": 5}


def requested_by_environment() -> bool:
    """Whether ``ACTLAB_NATIVE_KERNELS`` asks for the kernels (set and not ``0``)."""
    return os.environ.get(ENV_VAR, "") not in ("", "0")


_enabled = requested_by_environment()
_module: ModuleType | None = None
_extensions: dict[str, ModuleType | None] = {}
_build_errors: dict[str, str] = {}


def _capability_flags() -> list[str]:
    """Compiler flags for the CPU vector unit torch itself dispatches to here."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability == "AVX512":
        return ["-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512", "-mavx512f",
                "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"]
    if capability == "AVX2":
        return ["-DCPU_CAPABILITY_AVX2", "-DCPU_CAPABILITY=AVX2", "-mavx2", "-mfma", "-mf16c"]
    return []  # the portable Vectorized fallback


def _put_ninja_on_path() -> None:
    """torch runs ``ninja`` from PATH; the pip package's binary may not be there (a venv
    used without activating it)."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja
    except ImportError:
        return
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def load_extension(name: str, sources: list[Path], verbose: bool = False, *,
                   uses_kinds: bool = True) -> ModuleType | None:
    """Compile (or load from torch's cache) one of actlab's C++ extensions.

    Every source may include ``activation_functors.h`` (this directory is on the include
    path). Returns ``None`` with a one-time warning if the build fails or, for an extension
    that dispatches on activation kinds (``uses_kinds``), its kind table differs from
    :data:`KINDS` (:func:`check_kinds`); :func:`build_error` then gives the reason.
    Results are remembered per ``name``.
    """
    if name in _extensions:
        return _extensions[name]
    from torch.utils.cpp_extension import load

    _put_ninja_on_path()
    tag = torch.__version__.split("+")[0].replace(".", "_")
    module = None
    try:
        module = load(
            name=f"{name}_t{tag}",
            sources=[str(source) for source in sources],
            extra_include_paths=[str(SOURCE.parent)],
            # -fopenmp: at::parallel_for is inlined here and is an OpenMP loop; without the
            # flag it silently runs on one thread. The runtime resolves to torch's libgomp.
            extra_cflags=["-O3", "-fopenmp", *_capability_flags()],
            extra_ldflags=["-fopenmp"],
            verbose=verbose,
        )
        if uses_kinds:
            check_kinds(module)
    except Exception as exc:  # no compiler or ninja, unsupported platform, kind mismatch
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
        _build_errors[name] = reason
        warnings.warn(f"actlab native kernels ({name}) unavailable, using ATen ops ({reason})",
                      RuntimeWarning, stacklevel=2)
        module = None
    _extensions[name] = module
    return module


def check_kinds(module: ModuleType) -> None:
    """Raise ``RuntimeError`` unless the extension's kind table (``module.kinds()``) is
    :data:`KINDS`: a kernel run under the wrong number would compute another function."""
    table = dict(module.kinds())
    if table != KINDS:
        raise RuntimeError(f"kernel kinds of {getattr(module, '__name__', module)} are {table}, "
                           f"expected {KINDS}")


def build(verbose: bool = False) -> ModuleType | None:
    """Compile (or load from the cache) the shift kernels; ``None`` with a warning on failure."""
    global _module
    if _module is None:
        _module = load_extension("actlab_shift_kernels", [SOURCE], verbose)
    return _module


def enable(enabled: bool = True) -> bool:
    """Turn the native kernels on (building them if needed) or off; ``True`` if now in use."""
    global _enabled
    _enabled = enabled
    return bool(enabled and build() is not None)


def enabled() -> bool:
    """Whether activations currently use the native kernels."""
    return _enabled and build() is not None


def build_error() -> str | None:
    """Why a build failed (the first failure, naming the extension), or ``None``."""
    if not _build_errors:
        return None
    name, reason = next(iter(_build_errors.items()))
    return f"{name}: {reason}"


def usable(x: Tensor, kind: int | None) -> bool:
    """Whether the native kernels apply to ``x`` (CPU, contiguous, float32/64) for ``kind``."""
    return (
        kind is not None
        and _enabled
        and x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and x.is_contiguous()
        and x.numel() > 0
        and build() is not None
    )


def shift_forward(x: Tensor, kind: int, param: float, shift: float) -> Tensor:
    """``f(x) - shift`` in one pass (no autograd; see :mod:`actlab.activations.fused`)."""
    return _module.shift_forward(x, kind, param, shift)  # type: ignore[union-attr]


def center_forward(x: Tensor, kind: int, param: float) -> Tensor:
    """``f(x)`` minus its mean over the last dimension, row by row in cache."""
    return _module.center_forward(x, kind, param)  # type: ignore[union-attr]


def center_backward(grad: Tensor, x: Tensor, kind: int, param: float) -> Tensor:
    """``f'(x) * (grad - mean_last_dim(grad))``: the gradient of :func:`center_forward`."""
    return _module.center_backward(grad.contiguous(), x, kind, param)  # type: ignore[union-attr]


def gaussian_forward(x: Tensor, kind: int, param: float, z: float) -> tuple[Tensor, Tensor]:
    """``f(x)`` above its row's mean + ``z`` * std (biased), row by row in cache; and the
    cutoff of every row."""
    out, cutoff = _module.gaussian_forward(x, kind, param, z)  # type: ignore[union-attr]
    return out, cutoff


def mask_backward(grad: Tensor, x: Tensor, out: Tensor, kind: int, param: float,
                  cutoff: Tensor) -> Tensor:
    """``grad * f'(x)`` where :func:`gaussian_forward` kept (``cutoff``: its row cutoffs)."""
    return _module.mask_backward(grad.contiguous(), x, out, kind, param,  # type: ignore[union-attr]
                                 cutoff)


def selection() -> ModuleType | None:
    """The selection kernels of ``csrc/selection.cpp`` when the native kernels are enabled
    (built on first use), else ``None``."""
    if not _enabled:
        return None
    return load_extension("actlab_selection", [SELECTION_SOURCE], uses_kinds=False)


def selection_usable(x: Tensor) -> bool:
    """Whether the selection kernels apply to ``x`` (enabled, CPU, float32/64, non-empty)."""
    return (_enabled and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
            and x.numel() > 0 and selection() is not None)
