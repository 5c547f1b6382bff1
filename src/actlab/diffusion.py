"""Gaussian diffusion: forward process, loss (ε-MSE and the VLB term), DDPM and DDIM samplers.

The settings follow the reference code of "Scalable Diffusion Models with Transformers"
(Peebles & Xie, 2023), itself after "Improved Denoising Diffusion Probabilistic Models"
(Nichol & Dhariwal, 2021):

* :class:`GaussianDiffusion`: the linear β schedule of "Denoising Diffusion Probabilistic
  Models" (Ho et al., 2020), 1e-4 to 0.02 over T = 1000 steps (scaled by 1000/T for other T),
  ᾱ_t and the posterior q(x_{t-1} | x_t, x_0) in float64; :meth:`GaussianDiffusion.respace`
  keeps ``n`` evenly spaced steps (:func:`space_timesteps`; 250 is the sampling setting of
  "Bug or Feature²" App. D.4) with β recomputed from the kept ᾱ, and the model is still
  called with the original step numbers.
* the loss (:func:`loss_terms`, :func:`diffusion_loss`): ε-prediction MSE averaged over all elements, t
  uniform over 0..T-1. A model with learned variance (``2 C`` output channels: ε, then the
  interpolation values v) adds the hybrid objective's VLB term (Improved DDPM Sec. 3.1):
  the KL of the true posterior to the model's Gaussian, or at t = 0 the discretized Gaussian
  negative log-likelihood, in bits per dimension, with the mean's gradient stopped, weight 1
  (the reference's ``LossType.MSE``).
* :func:`ddpm_sample` (ancestral) and :func:`ddim_sample` ("Denoising Diffusion Implicit
  Models", Song et al., 2021, eq. 12), with classifier-free guidance ("Classifier-Free
  Diffusion Guidance", Ho & Salimans, 2022) in :func:`guided_output`.

Training is a recipe (:mod:`actlab.recipes.diffusion`:
:class:`~actlab.recipes.diffusion.DiffusionLoss` for the trainer,
:func:`~actlab.recipes.diffusion.train_diffusion`).

A model is any module called as ``model(x, t, y)`` with ``x`` (N, C, H, W), ``t`` (N,) integer
steps of the original schedule and ``y`` (N,) class ids, returning (N, C, H, W) (ε) or
(N, 2 C, H, W) (ε, then v). Random numbers come from ``torch.Generator`` objects on the CPU
and are moved to the data's device, so a run is the same on every device given its seeds.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from actlab.config import choose

FIXED_VARIANCES = ("large", "small")
LN2 = math.log(2.0)


# ---------------------------------------------------------------------------- schedule
def linear_betas(num_timesteps: int = 1000) -> Tensor:
    """The linear β schedule (Ho et al., 2020, Sec. 4), 1e-4 to 0.02 at T = 1000, both ends
    scaled by 1000 / T for other T as in the reference, in float64."""
    if num_timesteps < 1:
        raise ValueError(f"num_timesteps: must be >= 1, got {num_timesteps}")
    scale = 1000.0 / num_timesteps
    return torch.linspace(scale * 1e-4, scale * 0.02, num_timesteps, dtype=torch.float64)


def space_timesteps(num_timesteps: int, counts: int | str | Sequence[int]) -> list[int]:
    """The steps kept when ``num_timesteps`` are respaced, as the reference's ``space_timesteps``.

    ``counts`` is one count (``250``), a list of per-section counts (the steps are cut into
    equal sections, each strided evenly to its count, both ends kept), a string of them
    (``"10,15,20"``), or ``"ddimN"`` (the fixed stride of the DDIM paper giving exactly N).
    Returns the kept steps, sorted.
    """
    if isinstance(counts, str):
        if counts.startswith("ddim"):
            wanted = int(counts[len("ddim"):])
            for stride in range(1, num_timesteps):
                if len(range(0, num_timesteps, stride)) == wanted:
                    return list(range(0, num_timesteps, stride))
            raise ValueError(f"counts: no integer stride gives exactly {wanted} of "
                             f"{num_timesteps} steps")
        counts = [int(c) for c in counts.split(",")]
    elif isinstance(counts, int):
        counts = [counts]
    size_per, extra = divmod(num_timesteps, len(counts))
    kept: list[int] = []
    start = 0
    for i, count in enumerate(counts):
        size = size_per + (1 if i < extra else 0)
        if not 1 <= count <= size:
            raise ValueError(f"counts: cannot take {count} steps from a section of {size}")
        stride = 1.0 if count <= 1 else (size - 1) / (count - 1)
        kept += [start + round(k * stride) for k in range(count)]
        start += size
    return sorted(set(kept))


def _at(values: Tensor, t: Tensor | int, like: Tensor) -> Tensor | float:
    """``values[t]``: a Python float for one step, else shaped (N, 1, ...) like ``like``."""
    if isinstance(t, int):
        return float(values[t])
    picked = values[t.cpu()].to(device=like.device, dtype=like.dtype)
    return picked.view(-1, *([1] * (like.dim() - 1)))


class GaussianDiffusion:
    """A discrete Gaussian diffusion: β schedule, ᾱ and the posterior, all in float64 on the CPU.

    Args:
        betas: β_0 .. β_{T-1}, each in (0, 1].
        timestep_map: the original step number of each step (what the model is called
            with); default ``0..T-1``. :meth:`respace` fills it in.

    Attributes (float64, length T): ``betas``, ``alphas_cumprod`` (ᾱ_t),
    ``alphas_cumprod_prev`` (ᾱ_{t-1}, 1 at t = 0), ``posterior_variance``
    (β̃_t = β_t (1 − ᾱ_{t-1}) / (1 − ᾱ_t)), ``posterior_log_variance_clipped`` (log β̃_t with
    β̃_0 = 0 replaced by β̃_1, as the reference), ``posterior_mean_coef1`` and
    ``posterior_mean_coef2`` (the posterior mean is ``coef1 x_0 + coef2 x_t``).
    """

    def __init__(self, betas: Tensor | Sequence[float],
                 timestep_map: Tensor | Sequence[int] | None = None) -> None:
        betas = torch.as_tensor(betas, dtype=torch.float64).detach().cpu()
        if betas.dim() != 1 or len(betas) < 1:
            raise ValueError("betas: need a non-empty 1-D sequence, got shape "
                             f"{tuple(betas.shape)}")
        if not bool(((betas > 0) & (betas <= 1)).all()):
            raise ValueError("betas: every value must be in (0, 1]")
        self.betas = betas
        self.num_timesteps = len(betas)
        if timestep_map is None:
            timestep_map = torch.arange(self.num_timesteps)
        self.timestep_map = torch.as_tensor(timestep_map, dtype=torch.long).cpu()
        if self.timestep_map.shape != betas.shape:
            raise ValueError(f"timestep_map: need {self.num_timesteps} steps, "
                             f"got {len(self.timestep_map)}")
        alphas = 1.0 - betas
        self.alphas_cumprod = torch.cumprod(alphas, 0)
        self.alphas_cumprod_prev = torch.cat([betas.new_ones(1), self.alphas_cumprod[:-1]])
        one_minus = 1.0 - self.alphas_cumprod
        self.posterior_variance = betas * (1.0 - self.alphas_cumprod_prev) / one_minus
        # β̃_0 = 0; its log is only used at t = 0, where no noise is added.
        first = self.posterior_variance[1:2] if self.num_timesteps > 1 else betas[:1]
        self.posterior_log_variance_clipped = torch.log(
            torch.cat([first, self.posterior_variance[1:]]))
        self.posterior_mean_coef1 = betas * self.alphas_cumprod_prev.sqrt() / one_minus
        self.posterior_mean_coef2 = (1.0 - self.alphas_cumprod_prev) * alphas.sqrt() / one_minus

    @classmethod
    def linear(cls, num_timesteps: int = 1000) -> GaussianDiffusion:
        """The diffusion with :func:`linear_betas` (DiT's training setting at the default)."""
        return cls(linear_betas(num_timesteps))

    def respace(self, counts: int | str | Sequence[int]) -> GaussianDiffusion:
        """The same process on the steps :func:`space_timesteps` keeps, β_i = 1 − ᾱ_i / ᾱ_{i-1}
        over the kept steps (so ᾱ at a kept step is unchanged); the model sees the original
        step numbers."""
        kept = space_timesteps(self.num_timesteps, counts)
        alpha_bar = self.alphas_cumprod[kept]
        previous = torch.cat([alpha_bar.new_ones(1), alpha_bar[:-1]])
        return GaussianDiffusion(1.0 - alpha_bar / previous, self.timestep_map[kept])

    # -------------------------------------------------------------- forward process
    def q_sample(self, x0: Tensor, t: Tensor | int, noise: Tensor) -> Tensor:
        """x_t = √ᾱ_t x_0 + √(1 − ᾱ_t) ε, a sample of q(x_t | x_0) for the given noise ε."""
        if noise.shape != x0.shape:
            raise ValueError(f"noise: shape {tuple(noise.shape)} differs from x0's "
                             f"{tuple(x0.shape)}")
        return (_at(self.alphas_cumprod.sqrt(), t, x0) * x0
                + _at((1.0 - self.alphas_cumprod).sqrt(), t, x0) * noise)

    def q_posterior(self, x0: Tensor, xt: Tensor, t: Tensor | int
                    ) -> tuple[Tensor, Tensor | float, Tensor | float]:
        """Mean, variance and clipped log-variance of q(x_{t-1} | x_t, x_0)."""
        mean = (_at(self.posterior_mean_coef1, t, xt) * x0
                + _at(self.posterior_mean_coef2, t, xt) * xt)
        return (mean, _at(self.posterior_variance, t, xt),
                _at(self.posterior_log_variance_clipped, t, xt))

    def predict_x0(self, xt: Tensor, t: Tensor | int, eps: Tensor) -> Tensor:
        """x_0 = (x_t − √(1 − ᾱ_t) ε) / √ᾱ_t."""
        return (_at((1.0 / self.alphas_cumprod).sqrt(), t, xt) * xt
                - _at((1.0 / self.alphas_cumprod - 1.0).sqrt(), t, xt) * eps)

    def predict_eps(self, xt: Tensor, t: Tensor | int, x0: Tensor) -> Tensor:
        """ε = (x_t / √ᾱ_t − x_0) / √(1/ᾱ_t − 1), the inverse of :meth:`predict_x0`."""
        return ((_at((1.0 / self.alphas_cumprod).sqrt(), t, xt) * xt - x0)
                / _at((1.0 / self.alphas_cumprod - 1.0).sqrt(), t, xt))

    # -------------------------------------------------------------- reverse process
    def p_mean_variance(self, xt: Tensor, t: Tensor | int, eps: Tensor,
                        var_values: Tensor | None = None, *, clip_denoised: bool = False,
                        fixed_variance: str = "large"
                        ) -> tuple[Tensor, Tensor | float, Tensor]:
        """Mean, log-variance and predicted x_0 of the model's p(x_{t-1} | x_t).

        The mean is the posterior mean at the predicted x_0 (clipped to [-1, 1] with
        ``clip_denoised``). With ``var_values`` v the log-variance is
        ``(v + 1)/2 · log β_t + (1 − v)/2 · log β̃_t`` (Improved DDPM eq. 15, the reference's
        ``LEARNED_RANGE``); without, it is fixed: ``"large"`` β_t (with β̃_1 at t = 0, the
        reference's ``FIXED_LARGE``, its choice without learned variance) or ``"small"`` β̃_t.
        """
        choose("fixed_variance", fixed_variance, FIXED_VARIANCES)
        x0 = self.predict_x0(xt, t, eps)
        if clip_denoised:
            x0 = x0.clamp(-1.0, 1.0)
        mean, _, min_log = self.q_posterior(x0, xt, t)
        if var_values is not None:
            frac = (var_values + 1.0) / 2.0
            log_variance = frac * _at(self.betas.log(), t, xt) + (1.0 - frac) * min_log
        elif fixed_variance == "large":
            large = torch.cat([self.posterior_variance[1:2], self.betas[1:]])
            log_variance = _at(large.log() if self.num_timesteps > 1 else self.betas.log(), t, xt)
        else:
            log_variance = min_log
        return mean, log_variance, x0


# ---------------------------------------------------------------------------- likelihoods
def mean_flat(x: Tensor) -> Tensor:
    """Mean over every dimension but the first."""
    return x.mean(dim=tuple(range(1, x.dim())))


def normal_kl(mean1: Tensor, logvar1: Tensor | float, mean2: Tensor,
              logvar2: Tensor | float) -> Tensor:
    """KL(N(mean1, e^logvar1) ‖ N(mean2, e^logvar2)) elementwise, in nats."""
    logvar1 = torch.as_tensor(logvar1, dtype=mean1.dtype, device=mean1.device)
    logvar2 = torch.as_tensor(logvar2, dtype=mean1.dtype, device=mean1.device)
    return 0.5 * (-1.0 + logvar2 - logvar1 + torch.exp(logvar1 - logvar2)
                  + (mean1 - mean2) ** 2 * torch.exp(-logvar2))


def approx_standard_normal_cdf(x: Tensor) -> Tensor:
    """The tanh approximation of Φ the reference uses: ½ (1 + tanh(√(2/π) (x + 0.044715 x³)))."""
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def discretized_gaussian_log_likelihood(x: Tensor, means: Tensor,
                                        log_scales: Tensor | float) -> Tensor:
    """log P(bin of x) for data of 256 levels scaled to [-1, 1] under N(means, e^(2 log_scales)).

    Each level owns the interval ±1/255 around it; the two end levels own the tails
    (Ho et al., 2020, eq. 13). Φ is :func:`approx_standard_normal_cdf`, as in the reference.
    """
    log_scales = torch.as_tensor(log_scales, dtype=means.dtype, device=means.device)
    centered = x - means
    inv_std = torch.exp(-log_scales)
    cdf_plus = approx_standard_normal_cdf(inv_std * (centered + 1.0 / 255.0))
    cdf_min = approx_standard_normal_cdf(inv_std * (centered - 1.0 / 255.0))
    log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(x < -0.999, log_cdf_plus,
                       torch.where(x > 0.999, log_one_minus_cdf_min, log_delta))


# ---------------------------------------------------------------------------- loss
def split_output(out: Tensor, channels: int) -> tuple[Tensor, Tensor | None]:
    """``(ε, v)`` from a model output of ``channels`` (v is None) or ``2 * channels`` channels."""
    if out.dim() < 2 or out.shape[1] not in (channels, 2 * channels):
        raise ValueError(f"model output: need {channels} (ε) or {2 * channels} (ε, v) channels, "
                         f"got shape {tuple(out.shape)}")
    if out.shape[1] == channels:
        return out, None
    return out[:, :channels], out[:, channels:]


def vb_terms_bpd(diffusion: GaussianDiffusion, x0: Tensor, xt: Tensor, t: Tensor, eps: Tensor,
                 var_values: Tensor) -> Tensor:
    """Per-sample VLB term in bits per dimension (Improved DDPM Sec. 3.1): the KL of
    q(x_{t-1} | x_t, x_0) to the model's Gaussian for t > 0, the discretized Gaussian negative
    log-likelihood of x_0 at t = 0. No clipping of the predicted x_0."""
    true_mean, _, true_log_variance = diffusion.q_posterior(x0, xt, t)
    mean, log_variance, _ = diffusion.p_mean_variance(xt, t, eps, var_values)
    kl = mean_flat(normal_kl(true_mean, true_log_variance, mean, log_variance)) / LN2
    nll = -mean_flat(discretized_gaussian_log_likelihood(x0, mean, 0.5 * log_variance)) / LN2
    return torch.where(t.to(x0.device) == 0, nll, kl)


def takes_generator(model: Callable[..., Tensor]) -> bool:
    """Whether ``model``'s forward accepts a ``generator=`` keyword (DiT does, for its label
    dropout), looking through DDP's ``module`` and compile's ``_orig_mod`` wrappers."""
    inner = model
    for attr in ("_orig_mod", "module"):
        inner = getattr(inner, attr, inner)
    forward = getattr(inner, "forward", inner)
    try:
        return "generator" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def loss_terms(diffusion: GaussianDiffusion, model: Callable[..., Tensor], x0: Tensor,
               y: Tensor | None, t: Tensor, noise: Tensor,
               generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """Per-sample loss terms at steps ``t`` (N,) and noise ε: ``mse`` (ε-MSE averaged over the
    non-batch dims), ``vb`` (with learned variance: :func:`vb_terms_bpd` with ε detached, so it
    trains only v) and ``loss`` (their sum; weight 1 as the reference's ``LossType.MSE``).

    ``generator`` goes to the model as ``generator=`` when its forward takes one
    (:func:`takes_generator`), so what the model draws itself (DiT's label dropout) is seeded
    too."""
    xt = diffusion.q_sample(x0, t, noise)
    steps = diffusion.timestep_map[t.cpu()].to(x0.device)
    if generator is not None and takes_generator(model):
        out = model(xt, steps, y, generator=generator)
    else:
        out = model(xt, steps, y)
    if out.dtype in (torch.float16, torch.bfloat16):  # losses in float32 under autocast
        out = out.float()
    eps, var_values = split_output(out, x0.shape[1])
    terms = {"mse": mean_flat((noise - eps) ** 2)}
    if var_values is None:
        terms["loss"] = terms["mse"]
    else:
        terms["vb"] = vb_terms_bpd(diffusion, x0, xt, t, eps.detach(), var_values)
        terms["loss"] = terms["mse"] + terms["vb"]
    return terms


def draw_timesteps_and_noise(diffusion: GaussianDiffusion, x0: Tensor,
                             generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """t uniform over 0..T-1 (on the CPU) and ε ~ N(0, I) like ``x0`` (on its device), drawn in
    that order from ``generator``."""
    t = torch.randint(0, diffusion.num_timesteps, (x0.shape[0],), generator=generator)
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
    return t, noise


def diffusion_loss(diffusion: GaussianDiffusion, model: Callable[..., Tensor], x0: Tensor,
                   y: Tensor | None, *, generator: torch.Generator) -> Tensor:
    """The batch loss: :func:`loss_terms` ``loss`` averaged over the batch, t and ε drawn by
    :func:`draw_timesteps_and_noise`, then the model's own draws (label dropout) from the same
    ``generator``."""
    t, noise = draw_timesteps_and_noise(diffusion, x0, generator)
    return loss_terms(diffusion, model, x0, y, t, noise, generator)["loss"].mean()


# ---------------------------------------------------------------------------- sampling
def guided_output(model: Callable[..., Tensor], x: Tensor, t: Tensor, y: Tensor,
                  cfg_scale: float, null_class: int | None) -> Tensor:
    """The model output with classifier-free guidance (Ho & Salimans, 2022, eq. 6).

    The conditional and null-class passes run in one batch; ε = ε_null + s (ε_cond − ε_null)
    on all ε channels (the first C), the variance channels come from the conditional pass.
    The reference ``forward_with_cfg`` guides only the first three channels, which with
    4-channel latents leaves one ε channel unguided; we guide every ε channel. ``cfg_scale``
    1 is the plain conditional model (no null pass).
    """
    if cfg_scale == 1.0:
        return model(x, t, y)
    if null_class is None:
        raise ValueError("null_class: needed for cfg_scale != 1 (the model has no "
                         "config.num_classes to take it from)")
    null_y = torch.full_like(y, null_class)
    out = model(torch.cat([x, x]), torch.cat([t, t]), torch.cat([y, null_y]))
    cond, null = out.chunk(2)
    channels = x.shape[1]
    eps = null[:, :channels] + cfg_scale * (cond[:, :channels] - null[:, :channels])
    return torch.cat([eps, cond[:, channels:]], dim=1)


def _setup(model: nn.Module, diffusion: GaussianDiffusion, shape: Sequence[int], y: Tensor,
           steps: int | str | None, cfg_scale: float, null_class: int | None,
           generator: torch.Generator, device: torch.device | str | None,
           dtype: torch.dtype | None, noise: Tensor | None
           ) -> tuple[GaussianDiffusion, Tensor, Tensor, int | None]:
    """Validate; the (respaced) diffusion, x_T, the labels on the device and the null class."""
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2 or y.shape != (shape[0],):
        raise ValueError(f"y: need one label per sample, shape ({shape[0]},), got "
                         f"{tuple(y.shape)} for shape {shape}")
    if not math.isfinite(cfg_scale):
        raise ValueError(f"cfg_scale: must be finite, got {cfg_scale}")
    if steps is not None:
        diffusion = diffusion.respace(steps)
    params = [p for p in model.parameters() if p.is_floating_point()]
    if device is None:
        device = noise.device if noise is not None else (params[0].device if params else "cpu")
    if dtype is None:
        dtype = noise.dtype if noise is not None else (params[0].dtype if params else torch.float32)
    if noise is None:
        noise = torch.randn(shape, generator=generator, dtype=dtype)
    elif tuple(noise.shape) != shape:
        raise ValueError(f"noise: need shape {shape}, got {tuple(noise.shape)}")
    if null_class is None:
        null_class = getattr(getattr(model, "config", None), "num_classes", None)
    return diffusion, noise.to(device=device, dtype=dtype), y.to(device), null_class


def _predict(model: nn.Module, diffusion: GaussianDiffusion, x: Tensor, i: int, y: Tensor,
             cfg_scale: float, null_class: int | None) -> tuple[Tensor, Tensor | None]:
    t = torch.full((x.shape[0],), int(diffusion.timestep_map[i]), device=x.device,
                   dtype=torch.long)
    out = guided_output(model, x, t, y, cfg_scale, null_class)
    return split_output(out.to(x.dtype), x.shape[1])


def _noise_like(x: Tensor, generator: torch.Generator) -> Tensor:
    return torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)


@torch.no_grad()
def ddpm_sample(model: nn.Module, diffusion: GaussianDiffusion, shape: Sequence[int], y: Tensor,
                *, generator: torch.Generator, steps: int | str | None = None,
                cfg_scale: float = 1.0, null_class: int | None = None,
                device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                noise: Tensor | None = None, clip_denoised: bool = False,
                fixed_variance: str = "large") -> Tensor:
    """Ancestral sampling (Ho et al., 2020, Algorithm 2) from x_T ~ N(0, I) to x_0.

    Args:
        model: ``model(x, t, y)``, used in whatever mode it is in (put it in eval mode, as
            :class:`~actlab.train.ema.EMA` keeps its shadow; a training-mode model may
            drop labels at random).
        diffusion: the process; ``steps`` respaces it (e.g. 250), ``None`` keeps its steps.
        shape: ``(N, C, H, W)``; ``y``: the N class ids.
        generator: the CPU generator for x_T and each step's noise (drawn in that order).
        cfg_scale: classifier-free guidance scale s (:func:`guided_output`); 1 is none.
        null_class: the null class id for guidance (default ``model.config.num_classes``).
        device, dtype: where and in what dtype to sample (default: ``noise``'s, else the
            model's first parameter's, else the CPU and float32).
        noise: x_T itself instead of a draw.
        clip_denoised: clip the predicted x_0 to [-1, 1] (for pixels; off for latents).
        fixed_variance: without learned variance, ``"large"`` (β_t, the reference's choice
            when ``learn_sigma=False``) or ``"small"`` (β̃_t). With a ``2 C``-channel output
            the model's v sets the variance.
    """
    diffusion, x, y, null_class = _setup(model, diffusion, shape, y, steps, cfg_scale,
                                         null_class, generator, device, dtype, noise)
    for i in reversed(range(diffusion.num_timesteps)):
        eps, var_values = _predict(model, diffusion, x, i, y, cfg_scale, null_class)
        mean, log_variance, _ = diffusion.p_mean_variance(
            x, i, eps, var_values, clip_denoised=clip_denoised, fixed_variance=fixed_variance)
        if i == 0:  # no noise on the last step
            x = mean
        elif isinstance(log_variance, Tensor):
            x = mean + torch.exp(0.5 * log_variance) * _noise_like(x, generator)
        else:
            x = mean + math.exp(0.5 * log_variance) * _noise_like(x, generator)
    return x


@torch.no_grad()
def ddim_sample(model: nn.Module, diffusion: GaussianDiffusion, shape: Sequence[int], y: Tensor,
                *, generator: torch.Generator, steps: int | str | None = None, eta: float = 0.0,
                cfg_scale: float = 1.0, null_class: int | None = None,
                device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                noise: Tensor | None = None, clip_denoised: bool = False) -> Tensor:
    """DDIM sampling (Song et al., 2021, eq. 12): x_{t-1} = √ᾱ_{t-1} x̂_0 +
    √(1 − ᾱ_{t-1} − σ_t²) ε̂ + σ_t z with σ_t = η √((1 − ᾱ_{t-1})/(1 − ᾱ_t)) √(1 − ᾱ_t/ᾱ_{t-1}).

    ``eta`` 0 is deterministic given x_T; ``eta`` 1 is ancestral sampling with variance β̃_t.
    Variance channels of the model are ignored. The other arguments are those of
    :func:`ddpm_sample`; noise is drawn only for steps with σ_t > 0.
    """
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"eta: must be in [0, 1], got {eta}")
    diffusion, x, y, null_class = _setup(model, diffusion, shape, y, steps, cfg_scale,
                                         null_class, generator, device, dtype, noise)
    for i in reversed(range(diffusion.num_timesteps)):
        eps, _ = _predict(model, diffusion, x, i, y, cfg_scale, null_class)
        x0 = diffusion.predict_x0(x, i, eps)
        if clip_denoised:
            x0 = x0.clamp(-1.0, 1.0)
            eps = diffusion.predict_eps(x, i, x0)
        alpha_bar = float(diffusion.alphas_cumprod[i])
        alpha_bar_prev = float(diffusion.alphas_cumprod_prev[i])
        sigma = eta * math.sqrt((1 - alpha_bar_prev) / (1 - alpha_bar)
                                * (1 - alpha_bar / alpha_bar_prev))
        # max(): 1 - ᾱ_{t-1} - σ² is exactly 0 for eta 1 at t = 0, rounding may go below
        direction = math.sqrt(max(0.0, 1 - alpha_bar_prev - sigma ** 2))
        x = math.sqrt(alpha_bar_prev) * x0 + direction * eps
        if i > 0 and sigma > 0:
            x = x + sigma * _noise_like(x, generator)
    return x


__all__ = ["GaussianDiffusion", "approx_standard_normal_cdf", "ddim_sample", "ddpm_sample",
           "diffusion_loss", "discretized_gaussian_log_likelihood", "draw_timesteps_and_noise",
           "guided_output", "linear_betas", "loss_terms", "mean_flat", "normal_kl",
           "space_timesteps", "split_output", "takes_generator", "vb_terms_bpd"]
