"""The sparse decode kernel: ``y = mask(x) W^T`` reading only the weights that non-zero inputs need.

Decoding a token through a large FFN reads every weight once, so it runs at the pace of
memory. An input that is zero for every token of the call needs none of its column of ``W``;
with the weight stored input-major (``weight_t = W.t().contiguous()``, shape (in, out)), that
column is one contiguous row of ``weight_t``, and the kernel streams only the rows of the
active inputs. Three operations, in C++ (``activations/csrc/sparse_decode.cpp``) with a
PyTorch twin each:

* :func:`active_inputs`: the union over tokens of the inputs with ``|x| > threshold`` (NaN
  counts as active), and their values with ``|x| <= threshold`` set to zero (TEAL's magnitude
  sparsity; ``threshold=0`` keeps the non-zeros, an activation's own sparsity);
* :func:`gather_linear`: ``bias + xc @ weight_t[idx]`` for those inputs;
* :func:`sparse_rows`: ``x @ weight[idx]^T``, the outputs ``idx`` of an ``nn.Linear``-layout
  weight (the up projection's rows behind a non-zero gate).

:func:`sparse_linear` puts the first two together, and runs the dense product instead when
more of the inputs are active than the kernel's measured break-even (:func:`dense_above`;
there the skip cannot pay for its bookkeeping). Weights are float32 or
bfloat16 (accumulated in float32); inputs float32 or bfloat16. Results equal the dense
product of the masked input up to float summation order.

The kernel is compiled on first use (a C++ compiler and ``ninja``; about a minute once, then
cached in torch's extension directory) by :func:`actlab.activations.native.load_extension`,
as the other opt-in kernels are, with AVX-512, AVX2 and portable loops in one build and the
best one the CPU supports chosen at run time. Where no compiler is found, or the build
fails, every function here runs its PyTorch twin (``backend="torch"``), which gathers the
active rows with ``index_select`` and multiplies with ATen.
"""

from __future__ import annotations

import os
import shutil
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor

from actlab.activations import native
from actlab.errors import did_you_mean

__all__ = [
    "BACKENDS",
    "BREAK_EVEN",
    "BREAK_EVEN_SMALL",
    "DENSE_ABOVE",
    "ISAS",
    "SMALL_MATRIX_BYTES",
    "SOURCE",
    "active_inputs",
    "available",
    "compiler",
    "dense_above",
    "extension",
    "gather_linear",
    "isa_supported",
    "l2_cache_bytes",
    "masked",
    "project",
    "sparse_linear",
    "sparse_linears",
    "sparse_rows",
]

SOURCE = native.SOURCE.parent / "sparse_decode.cpp"
#: The instruction sets of the kernel's loops, by the number the extension uses.
ISAS = ("portable", "avx2", "avx512")
BACKENDS = ("auto", "kernel", "torch")
#: Share of active inputs (of the union over the call's tokens) above which
#: :func:`sparse_linear` runs torch's dense product instead of the kernel, by weight dtype and
#: tokens per call (1, or 2 and more): the break-even, dense time over the kernel's time with
#: every input active, measured by ``benchmarks/sparse_decode.py`` at LLaMA-7B's FFN shape
#: (ours: a 2-core AMD EPYC, one thread; 1.0 where the kernel was never slower: it always
#: runs). Torch's bfloat16 product at 8 tokens (oneDNN) took 0.89-0.96 of the kernel's time
#: over two runs: the lower is kept.
BREAK_EVEN: dict[tuple[torch.dtype, int], float] = {
    (torch.float32, 1): 1.0, (torch.float32, 2): 1.0,
    (torch.bfloat16, 1): 1.0, (torch.bfloat16, 2): 0.89,
}
#: The same for a matrix small enough to stay in cache (at most :data:`SMALL_MATRIX_BYTES`),
#: by tokens per call (1, or 2 and more), where the skipped rows save little and per-call
#: costs decide. Measured by ``benchmarks/sparse_decode.py`` (``small_matrix_break_even``) on
#: our GPT (FFN 128 x 512 float32, 256 KiB matrices), whole forward, TEAL at 40-90 %: the
#: kernel against torch's dense product of the masked input ran the model 1.12-1.22x faster
#: at one token (union 10-61 % active) and 1.11-1.27x at 8 tokens (37-98 % active), so dense
#: never wins there: 1.0 (ours: 2-core AMD EPYC, one thread, 31 interleaved repeats).
BREAK_EVEN_SMALL: dict[int, float] = {1: 1.0, 2: 1.0}
#: Overrides :data:`BREAK_EVEN` for every call when set (``2.0``: never dense).
DENSE_ABOVE: float | None = None

_NAME = "actlab_sparse_decode"
_KERNEL_DTYPES = (torch.float32, torch.bfloat16)


def compiler() -> str | None:
    """The C++ compiler torch's extension builder would run (``$CXX`` or ``c++``), or ``None``."""
    return shutil.which(os.environ.get("CXX", "c++"))


def extension() -> ModuleType | None:
    """The compiled kernel (built on first use), or ``None`` without a compiler or when the
    build failed (then :func:`actlab.activations.native.build_error` says why)."""
    if _NAME in native._extensions:  # built, failed or found without a compiler before
        return native._extensions[_NAME]
    if compiler() is None:  # the PyTorch path, without a build attempt or a warning
        native._extensions[_NAME] = None
        return None
    return native.load_extension(_NAME, [SOURCE], uses_kinds=False)


def available() -> bool:
    """Whether the C++ kernel can run here."""
    return extension() is not None


def isa_supported(isa: str) -> bool:
    """Whether the kernel's ``isa`` loop (one of :data:`ISAS`) runs on this CPU."""
    ext = extension()
    return ext is not None and bool(ext.supported()[_isa_number(isa)])


def masked(x: Tensor, threshold: float = 0.0) -> Tensor:
    """``x`` with the entries ``|x| <= threshold`` set to zero (NaN kept); ``x`` itself when
    ``threshold`` is 0 (the zeros are already zero)."""
    if threshold == 0.0:
        return x
    return torch.where(x.abs() <= threshold, torch.zeros((), dtype=x.dtype), x)


def active_inputs(x: Tensor, threshold: float = 0.0, *,
                  backend: str = "auto") -> tuple[Tensor, Tensor]:
    """``(idx, xc)``: the inputs of ``x`` (tokens, in) active for at least one token, ascending,
    and their values (tokens, len(idx)), zero where ``|x| <= threshold``."""
    ext = _kernel(backend, x)
    if ext is not None:
        idx, xc = ext.compact(x.float().contiguous(), float(threshold))
        return idx, xc.to(x.dtype)
    xm = masked(x, threshold)
    idx = (xm != 0).any(0).nonzero().squeeze(1)
    return idx, xm.index_select(1, idx)


def gather_linear(xc: Tensor, idx: Tensor, weight_t: Tensor, bias: Tensor | None = None, *,
                  backend: str = "auto", isa: str | None = None) -> Tensor:
    """``bias + xc @ weight_t[idx]``: the product with only the rows ``idx`` of the input-major
    weight ``weight_t`` (in, out), ``xc`` (tokens, len(idx))."""
    ext = _kernel(backend, xc, weight_t)
    if ext is None:
        wide = torch.promote_types(xc.dtype, weight_t.dtype)
        out = xc.to(wide) @ weight_t.index_select(0, idx).to(wide)
        return (out if bias is None else out + bias).to(xc.dtype)
    b = None if bias is None else bias.float().contiguous()
    out = ext.cols(xc.float().contiguous(), idx.contiguous(), weight_t, b, _isa_arg(isa))
    return out.to(xc.dtype)


def sparse_rows(x: Tensor, weight: Tensor, idx: Tensor, bias: Tensor | None = None, *,
                backend: str = "auto", isa: str | None = None) -> Tensor:
    """``F.linear(x, weight[idx], bias[idx])``: the outputs ``idx`` only, reading only those
    rows of the ``nn.Linear``-layout ``weight`` (out, in); ``x`` (..., in) -> (..., len(idx))."""
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    ext = _kernel(backend, flat, weight)
    if ext is None:
        wide = torch.promote_types(flat.dtype, weight.dtype)
        out = F.linear(flat.to(wide), weight.index_select(0, idx).to(wide)).to(x.dtype)
    else:
        out = ext.rows(flat.float().contiguous(), idx.contiguous(), weight, _isa_arg(isa))
        out = out.to(x.dtype)
    if bias is not None:
        out = out + bias.index_select(0, idx)
    return out.reshape(*lead, idx.numel())


def sparse_linear(x: Tensor, weight_t: Tensor, bias: Tensor | None = None, *,
                  threshold: float = 0.0, weight: Tensor | None = None,
                  dense_above: float | None = None, backend: str = "auto",
                  isa: str | None = None) -> Tensor:
    """``F.linear(masked(x, threshold), W, bias)`` reading only the rows of ``weight_t = W^T``
    (in, out, contiguous) whose inputs are active for some token of ``x`` (..., in).

    Args:
        weight: ``W`` itself (out, in), if the caller has it: the dense product (run when more
            than ``dense_above`` of the inputs are active) then uses torch's own kernel on
            ``W``'s layout, as the unmodified layer would.
        dense_above: active share above which the product runs dense (default
            :func:`dense_above` with the C++ kernel; the PyTorch path never switches).
        backend: ``"auto"`` (the kernel where it is built, else PyTorch), ``"kernel"`` (error
            if it cannot be built) or ``"torch"``.
        isa: the kernel loop to run (one of :data:`ISAS`; default the best this CPU runs).
    """
    isa_number = _isa_arg(isa)  # checked before any path is chosen
    n = x.shape[-1]
    if weight_t.dim() != 2 or weight_t.shape[0] != n:
        raise ValueError(f"sparse_linear: x has {n} features, weight_t has shape "
                         f"{tuple(weight_t.shape)} (expected ({n}, out))")
    ext = _kernel(backend, x, weight_t)
    if ext is None:
        lead, flat = x.shape[:-1], x.reshape(-1, n)
        idx, xc = active_inputs(flat, threshold, backend="torch")
        if (dense_above is None or idx.numel() <= dense_above * n
                or not _dense_ok(x, weight, weight_t)):
            out = gather_linear(xc, idx, weight_t, bias, backend="torch")
            return out.reshape(*lead, weight_t.shape[1])
        return _dense(masked(x, threshold), weight_t, weight, bias)
    limit = _limit(dense_above, weight_t, x)
    if not _dense_ok(x, weight, weight_t):
        limit = 2.0  # no dense kernel computes this: always the sparse one
    # one C++ call whichever product runs: on small layers the per-call cost decides
    return ext.linear_one(x, weight_t, weight, bias, threshold, limit, isa_number)


def project(x: Tensor, weight_t: Tensor, weight: Tensor, bias: Tensor | None,
            threshold: float) -> Tensor:
    """:func:`sparse_linear` with the C++ kernel, ``weight`` given and no argument checks
    beyond the kernel's own: the swapped FFN forwards' path, whose callers have checked the
    backend. On a layer of our GPT's size a forward's FFNs cost tens of microseconds, so the
    Python work per call matters (measured: the checked path cost ~5 % of the whole model)."""
    ext = native._extensions[_NAME]
    limit = 2.0
    if x.dtype == weight.dtype:  # else no dense kernel computes this: always the sparse one
        limit = dense_above(weight_t.dtype, x.numel() // x.shape[-1],
                            weight_t.numel() * weight_t.element_size())
    return ext.linear_one(x, weight_t, weight, bias, threshold, limit, -1)


def sparse_linears(x: Tensor, layers: list[tuple[Tensor, Tensor, Tensor | None]], *,
                   threshold: float = 0.0, dense_above: float | None = None,
                   backend: str = "auto") -> list[Tensor]:
    """:func:`sparse_linear` for several layers reading one input (a gated FFN's gate and up
    projections), whose active inputs are found once. ``layers``: ``(weight_t, weight,
    bias)`` each, ``weight`` the ``nn.Linear``-layout weight (out, in)."""
    ext = _kernel(backend, x, layers[0][0])
    if ext is None:
        lead, n = x.shape[:-1], x.shape[-1]
        flat = x.reshape(-1, n)
        idx, xc = active_inputs(flat, threshold, backend="torch")
        if (dense_above is None or idx.numel() <= dense_above * n
                or not all(_dense_ok(x, w, wt) for wt, w, _ in layers)):
            return [gather_linear(xc, idx, wt, b, backend="torch").reshape(*lead, wt.shape[1])
                    for wt, _, b in layers]
        xm = masked(x, threshold)
    else:
        limit = _limit(dense_above, layers[0][0], x)
        if not all(_dense_ok(x, w, wt) for wt, w, _ in layers):
            limit = 2.0
        outs, xm = ext.linear(x, [wt for wt, _, _ in layers], [b for _, _, b in layers],
                              threshold, limit, -1)
        if outs:
            return outs
        xm = x if xm is None else xm
    return [_dense(xm, wt, w, b) for wt, w, b in layers]


def dense_above(weight_dtype: torch.dtype, tokens: int, weight_bytes: int | None = None
                ) -> float:
    """The active share above which the dense product is faster than the kernel, for weights
    of ``weight_dtype`` and ``tokens`` per call: :data:`DENSE_ABOVE` when set; else, for a
    matrix of at most :data:`SMALL_MATRIX_BYTES` (``weight_bytes``), :data:`BREAK_EVEN_SMALL`;
    else :data:`BREAK_EVEN` (1.0 for a dtype not in the table)."""
    if DENSE_ABOVE is not None:
        return DENSE_ABOVE
    bucket = 1 if tokens <= 1 else 2
    if weight_bytes is not None and weight_bytes <= SMALL_MATRIX_BYTES:
        return BREAK_EVEN_SMALL[bucket]
    return BREAK_EVEN.get((weight_dtype, bucket), 1.0)


def l2_cache_bytes(default: int = 1 << 20) -> int:
    """One core's L2 cache in bytes as Linux reports it (sysfs), else ``default``."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(root)):
            with open(f"{root}/{entry}/level") as f:
                level = f.read().strip()
            with open(f"{root}/{entry}/type") as f:
                kind = f.read().strip()
            if level == "2" and kind in ("Unified", "Data"):
                with open(f"{root}/{entry}/size") as f:
                    size = f.read().strip()
                scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
                return int(size.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return default


#: Matrices of at most this many bytes use :data:`BREAK_EVEN_SMALL`: one core's L2 cache as
#: the OS reports it (ours: matrices that fit there are read at cache speed either way).
SMALL_MATRIX_BYTES: int = l2_cache_bytes()


def _limit(dense_above_arg: float | None, weight_t: Tensor, x: Tensor) -> float:
    if dense_above_arg is not None:
        return dense_above_arg
    return dense_above(weight_t.dtype, x.numel() // max(x.shape[-1], 1),
                       weight_t.numel() * weight_t.element_size())


def _dense(xm: Tensor, weight_t: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """Torch's dense product of the masked input: on ``weight``'s own layout when given."""
    xm = xm.to(weight_t.dtype)
    if weight is not None:
        return F.linear(xm, weight, bias)
    out = xm @ weight_t
    return out if bias is None else out + bias


def _dense_ok(x: Tensor, weight: Tensor | None, weight_t: Tensor) -> bool:
    """Whether torch's dense product computes what the kernel does: the same dtypes (a float32
    input times bfloat16 weights has no torch kernel that keeps the input's precision)."""
    return x.dtype == (weight if weight is not None else weight_t).dtype


def _kernel(backend: str, x: Tensor, weight: Tensor | None = None) -> ModuleType | None:
    """The extension if ``backend`` asks for it and it applies to these tensors, else ``None``."""
    if backend == "torch":
        return None
    if backend not in BACKENDS:
        hint = did_you_mean(backend, BACKENDS, quote=True, prefix="; ")
        raise ValueError(f"unknown backend {backend!r}{hint} (valid: {', '.join(BACKENDS)})")
    fits = (x.is_cpu and x.dtype in _KERNEL_DTYPES
            and (weight is None or (weight.is_cpu and weight.dtype in _KERNEL_DTYPES
                                    and weight.is_contiguous())))
    ext = extension() if fits or backend == "kernel" else None
    if backend == "kernel":
        if ext is None:
            raise RuntimeError("the sparse decode kernel is unavailable here: "
                               f"{native.build_error() or 'no C++ compiler found'}")
        if not fits:
            raise ValueError("the sparse decode kernel takes CPU float32/bfloat16 inputs and "
                             f"contiguous weights; got input {x.dtype} on {x.device}, weights "
                             f"{None if weight is None else weight.dtype}")
    return ext


def _isa_number(isa: str) -> int:
    if isa not in ISAS:
        hint = did_you_mean(isa, ISAS, quote=True, prefix="; ")
        raise ValueError(f"unknown instruction set {isa!r}{hint} (valid: {', '.join(ISAS)})")
    return ISAS.index(isa)


def _isa_arg(isa: str | None) -> int:
    return -1 if isa is None else _isa_number(isa)
