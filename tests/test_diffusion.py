"""Diffusion: schedule, loss and samplers against closed forms for Gaussian data; EMA.

The oracle is exact: for x0 | y ~ N(μ_y, σ_y² I) and x_t = √ᾱ_t x0 + √(1 − ᾱ_t) ε,
E[ε | x_t] = √(1 − ᾱ_t) (x_t − √ᾱ_t μ) / V_t with V_t = ᾱ_t σ² + 1 − ᾱ_t. Every reverse step
is then a linear-Gaussian map, so what a sampler should produce follows in closed form:

* σ = 1: x_{s} | x_t (s the previous kept step) has variance β = 1 − ᾱ_t / ᾱ_s, so ancestral
  sampling with the fixed variance β_t is exact ("Denoising Diffusion Probabilistic Models",
  Ho et al., 2020, Sec. 3.2: β_t is optimal for x0 ~ N(0, I));
* any σ: with the variance set (through v) to the true Var(x_s | x_t) every step is exact;
* DDIM with η = 0 maps the centred x_t by k_t = (√(ᾱ_t ᾱ_s) σ² + √((1−ᾱ_t)(1−ᾱ_s))) / V_t.

The last step adds no noise, so the output misses Var(x0 | x_{t_0}) = σ² (1 − ᾱ_0) / V_0.
Tolerances are 4 Monte Carlo standard errors of the sample size used.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import Tensor, nn

from actlab.recipes.diffusion import (
    DiffusionLoss,
    GaussianDiffusion,
    ddim_sample,
    ddpm_sample,
    diffusion_loss,
    discretized_gaussian_log_likelihood,
    draw_timesteps_and_noise,
    guided_output,
    loss_terms,
    normal_kl,
    space_timesteps,
    split_output,
    train_diffusion,
)
from actlab.train.callbacks import Callback
from actlab.train.ema import EMA
from actlab.train.loop import Trainer
from actlab.train.settings import TrainSettings


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The Monte Carlo tests on one thread, restored afterwards (a module-level setting would
    leak into every later test of the session)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


T = 1000
BETAS = np.linspace(1e-4, 0.02, T)  # Ho et al. (2020), Sec. 4
ABAR = np.cumprod(1.0 - BETAS)
SHAPE = (4096, 1, 2, 2)  # 16384 i.i.d. elements per run
M = SHAPE[0] * SHAPE[2] * SHAPE[3]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class GaussianOracle(nn.Module):
    """Exact ε (and optionally v) for x0 | y ~ N(mu[y], sigma[y]²) under the linear schedule.

    ``kept``: the steps of the sampling chain, needed for v (the true reverse variance).
    """

    def __init__(self, mu: list[float], sigma: list[float], *, learn_sigma: bool = False,
                 kept: list[int] | None = None) -> None:
        super().__init__()
        self.mu = torch.tensor(mu, dtype=torch.float64)
        self.sigma = torch.tensor(sigma, dtype=torch.float64)
        self.learn_sigma = learn_sigma
        self.abar = torch.tensor(ABAR)
        kept = list(range(T)) if kept is None else kept
        self.prev_abar = torch.full((T,), math.nan, dtype=torch.float64)  # ᾱ_s, NaN at the start
        self.prev_abar[kept[1:]] = torch.tensor(ABAR[kept[:-1]])
        self.config = SimpleNamespace(num_classes=len(mu) - 1)  # last entry: the null class
        self.batch_sizes: list[int] = []

    def forward(self, x: Tensor, t: Tensor, y: Tensor) -> Tensor:
        self.batch_sizes.append(len(x))
        view = (-1,) + (1,) * (x.dim() - 1)
        a = self.abar[t.cpu()].view(view).to(x)
        mu = self.mu[y.cpu()].view(view).to(x)
        s2 = (self.sigma[y.cpu()] ** 2).view(view).to(x)
        v_t = a * s2 + 1 - a
        eps = torch.sqrt(1 - a) * (x - torch.sqrt(a) * mu) / v_t
        if not self.learn_sigma:
            return eps
        a_s = self.prev_abar[t.cpu()].view(view).to(x)
        v_s = a_s * s2 + 1 - a_s
        true_var = v_s - (a / a_s) * v_s ** 2 / v_t  # Var(x_s | x_t)
        beta = 1 - a / a_s
        beta_tilde = beta * (1 - a_s) / (1 - a)
        values = 2 * (true_var.log() - beta_tilde.log()) / (beta.log() - beta_tilde.log()) - 1
        # first step of the chain: no noise is added there, v is unused
        values = torch.where(torch.isnan(a_s), torch.zeros_like(values), values)
        return torch.cat([eps, values.expand_as(eps)], dim=1)


def output_variance(sigma: float) -> float:
    """σ² minus what the noiseless last step (t = 0) leaves out."""
    a0 = ABAR[0]
    return sigma ** 2 - sigma ** 2 * (1 - a0) / (a0 * sigma ** 2 + 1 - a0)


def assert_moments(x: Tensor, mean: float, var: float) -> None:
    """Sample mean and standard deviation within 4 standard errors (normal data)."""
    flat = x.double().flatten()
    n, std = flat.numel(), math.sqrt(var)
    assert abs(float(flat.mean()) - mean) < 4 * std / math.sqrt(n)
    assert abs(float(flat.std()) - std) < 4 * std / math.sqrt(2 * n)


# ---------------------------------------------------------------------------- schedule
def test_linear_schedule_matches_closed_forms():
    d = GaussianDiffusion.linear()
    assert d.betas.dtype == torch.float64 and d.num_timesteps == T
    assert float(d.betas[0]) == pytest.approx(1e-4, abs=1e-16)
    assert float(d.betas[-1]) == pytest.approx(0.02, abs=1e-16)
    np.testing.assert_allclose(d.betas.numpy(), BETAS, rtol=1e-14)
    np.testing.assert_allclose(d.alphas_cumprod.numpy(), ABAR, rtol=1e-12)
    half = GaussianDiffusion.linear(500)  # both ends scaled by 1000 / T
    assert float(half.betas[0]) == pytest.approx(2e-4) and float(half.betas[-1]) == pytest.approx(0.04)


@pytest.mark.parametrize("counts", [None, 250, 50])
def test_posterior_is_gaussian_conditioning(counts):
    """q(x_s | x_t, x0) from conditioning the joint Gaussian of (x_s, x_t) given x0."""
    d = GaussianDiffusion.linear()
    kept = list(range(T)) if counts is None else space_timesteps(T, counts)
    d = d if counts is None else d.respace(counts)
    a_t = ABAR[kept]
    a_s = np.append(1.0, a_t[:-1])
    alpha = a_t / a_s  # x_t = √α x_s + √(1 − α) ξ
    cov, var_t = np.sqrt(alpha) * (1 - a_s), 1 - a_t
    coef2 = cov / var_t
    coef1 = np.sqrt(a_s) - coef2 * np.sqrt(a_t)
    variance = (1 - a_s) - cov ** 2 / var_t
    np.testing.assert_allclose(d.posterior_mean_coef1.numpy(), coef1, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(d.posterior_mean_coef2.numpy(), coef2, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(d.posterior_variance.numpy(), variance, rtol=1e-9, atol=1e-14)
    clipped = d.posterior_log_variance_clipped.numpy()
    assert clipped[0] == pytest.approx(math.log(variance[1]))
    np.testing.assert_allclose(clipped[1:], np.log(variance[1:]), rtol=1e-9)


def test_respacing_keeps_alpha_bar_and_original_steps():
    d = GaussianDiffusion.linear()
    kept = space_timesteps(T, 250)
    assert len(kept) == 250 and kept[0] == 0 and kept[-1] == T - 1
    assert kept == [round(k * 999 / 249) for k in range(250)]
    spaced = d.respace(250)
    np.testing.assert_allclose(spaced.alphas_cumprod.numpy(), ABAR[kept], rtol=1e-12)
    assert spaced.timestep_map.tolist() == kept
    twice = spaced.respace(50)  # respacing a respaced process composes the maps
    np.testing.assert_allclose(twice.alphas_cumprod.numpy(),
                               ABAR[twice.timestep_map.numpy()], rtol=1e-12)
    assert space_timesteps(T, "ddim50") == list(range(0, T, 20))
    sections = space_timesteps(300, "10,15,20")
    for (lo, hi), count in zip([(0, 99), (100, 199), (200, 299)], [10, 15, 20]):
        part = [s for s in sections if lo <= s <= hi]
        assert len(part) == count and part[0] == lo and part[-1] == hi


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match="counts"):
        GaussianDiffusion.linear().respace(2000)
    with pytest.raises(ValueError, match="counts"):
        space_timesteps(T, 0)
    with pytest.raises(ValueError, match="betas"):
        GaussianDiffusion([0.1, 1.5])
    with pytest.raises(ValueError, match="noise"):
        GaussianDiffusion.linear().q_sample(torch.zeros(2, 3), 5, torch.zeros(2, 4))


def test_q_sample_is_the_closed_form():
    d = GaussianDiffusion.linear()
    x0, noise = torch.randn(6, 2, 3, 3, generator=gen(0)), torch.randn(6, 2, 3, 3, generator=gen(1))
    t = torch.tensor([0, 1, 10, 500, 998, 999])
    expected = (torch.tensor(np.sqrt(ABAR[t.numpy()])).float().view(-1, 1, 1, 1) * x0
                + torch.tensor(np.sqrt(1 - ABAR[t.numpy()])).float().view(-1, 1, 1, 1) * noise)
    torch.testing.assert_close(d.q_sample(x0, t, noise), expected)


# ---------------------------------------------------------------------------- samplers
@pytest.mark.parametrize("steps", [None, 250, 50])
def test_ddpm_fixed_variance_recovers_unit_gaussian(steps):
    # σ = 1: fixed variance β_t is exact. x_T ~ N(0, 1) instead of N(√ᾱ_T μ, 1) shifts the
    # output mean by about ᾱ_T |μ| ≈ 4e-5 |μ|, far below the standard error.
    mu = 0.8
    model = GaussianOracle([mu, 0.0], [1.0, 1.0])
    x = ddpm_sample(model, GaussianDiffusion.linear(), SHAPE, torch.zeros(SHAPE[0], dtype=torch.long),
                    steps=steps, generator=gen(0))
    assert x.shape == SHAPE and x.dtype == torch.float32
    assert_moments(x, mu, output_variance(1.0))


@pytest.mark.parametrize("steps", [None, 50])
def test_ddpm_learned_variance_recovers_gaussian(steps):
    mu, sigma = -0.6, 0.5  # σ ≠ 1: only the true reverse variance (through v) is exact
    kept = space_timesteps(T, steps or T)
    model = GaussianOracle([mu, 0.0], [sigma, 1.0], learn_sigma=True, kept=kept)
    x = ddpm_sample(model, GaussianDiffusion.linear(), SHAPE, torch.zeros(SHAPE[0], dtype=torch.long),
                    steps=steps, generator=gen(1))
    assert_moments(x, mu, output_variance(sigma))


def ddim_gain(kept: list[int], sigma: float) -> float:
    """Product of the DDIM factors k_t over the chain (the last step goes to ᾱ = 1)."""
    a_t = ABAR[kept]
    a_s = np.append(1.0, a_t[:-1])
    v_t = a_t * sigma ** 2 + 1 - a_t
    return float(np.prod((np.sqrt(a_t * a_s) * sigma ** 2 + np.sqrt((1 - a_t) * (1 - a_s))) / v_t))


@pytest.mark.parametrize("steps", [T, 250, 50])
def test_ddim_is_the_closed_form_affine_map(steps):
    mu, sigma = 0.7, 0.6
    kept = space_timesteps(T, steps)
    gain = ddim_gain(kept, sigma)
    model = GaussianOracle([mu, 0.0], [sigma, 1.0])
    noise = torch.randn(SHAPE, generator=gen(2), dtype=torch.float64)
    y = torch.zeros(SHAPE[0], dtype=torch.long)
    x = ddim_sample(model, GaussianDiffusion.linear(), SHAPE, y, steps=steps, noise=noise,
                    generator=gen(3))
    # centred x_T is x_T − √ᾱ_T μ; the output is μ plus the gain times it
    expected = mu + gain * (noise - math.sqrt(ABAR[-1]) * mu)
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-10)
    # from a draw: the moments of that map within Monte Carlo error
    drawn = ddim_sample(model, GaussianDiffusion.linear(), SHAPE, y, steps=steps, generator=gen(4))
    assert_moments(drawn, mu * (1 - gain * math.sqrt(ABAR[-1])), gain ** 2)
    if steps == T:  # with every step the discretisation shrinks σ by less than one std error
        assert abs(gain - sigma) < sigma / math.sqrt(2 * M)


def test_ddim_eta_one_is_ancestral_sampling_with_posterior_variance():
    """Song et al. (2021), Sec. 4.1: η = 1 gives the DDPM sampler with variance β̃_t."""
    model = GaussianOracle([0.3, 0.0], [0.5, 1.0])
    y = torch.zeros(256, dtype=torch.long)
    shape = (256, 1, 2, 2)
    d = GaussianDiffusion.linear()
    a = ddim_sample(model, d, shape, y, steps=50, eta=1.0, generator=gen(5), dtype=torch.float64)
    b = ddpm_sample(model, d, shape, y, steps=50, fixed_variance="small", generator=gen(5),
                    dtype=torch.float64)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_guidance_samples_the_extrapolated_gaussian():
    # Equal variances: ε_null + s (ε_c − ε_null) is the oracle of N(μ_null + s (μ_c − μ_null), σ²)
    mu, null_mu = [-1.0, 1.0], 0.2
    model = GaussianOracle([*mu, null_mu], [1.0, 1.0, 1.0])
    y = torch.arange(SHAPE[0]) % 2
    d = GaussianDiffusion.linear()
    plain = ddpm_sample(model, d, SHAPE, y, steps=50, generator=gen(6))
    assert set(model.batch_sizes) == {SHAPE[0]}  # cfg_scale 1: no null pass
    for c in (0, 1):
        assert_moments(plain[y == c], mu[c], output_variance(1.0))
    model.batch_sizes.clear()
    scale = 3.0
    guided = ddpm_sample(model, d, SHAPE, y, steps=50, cfg_scale=scale, generator=gen(7))
    assert set(model.batch_sizes) == {2 * SHAPE[0]}  # one batch with both halves
    for c in (0, 1):
        assert_moments(guided[y == c], null_mu + scale * (mu[c] - null_mu), output_variance(1.0))
    # DDIM: exactly the deterministic samples of the extrapolated oracle
    extrapolated = GaussianOracle([null_mu + scale * (m - null_mu) for m in mu] + [0.0],
                                  [1.0, 1.0, 1.0])
    noise = torch.randn(256, 1, 2, 2, generator=gen(8), dtype=torch.float64)
    kwargs = {"steps": 50, "noise": noise, "generator": gen(9)}
    torch.testing.assert_close(
        ddim_sample(model, d, noise.shape, y[:256], cfg_scale=scale, **kwargs),
        ddim_sample(extrapolated, d, noise.shape, y[:256], **kwargs), rtol=0, atol=1e-10)


class LabelDependent(nn.Module):
    """Output (ε, v) that depends on x, t and y, with 4 channels as a VAE latent."""

    def forward(self, x: Tensor, t: Tensor, y: Tensor) -> Tensor:
        view = (-1, 1, 1, 1)
        eps = torch.sin(x * (1 + y.view(view))) + t.view(view) / 1000
        v = torch.cos(x) * (y.view(view) - 1.5)
        return torch.cat([eps, v], dim=1)


def test_guided_output_guides_every_eps_channel_and_keeps_conditional_variance():
    model = LabelDependent()
    x = torch.randn(5, 4, 2, 2, generator=gen(10))
    t, y, null = torch.full((5,), 321), torch.tensor([0, 1, 2, 1, 0]), 3
    cond, uncond = model(x, t, y), model(x, t, torch.full_like(y, null))
    out = guided_output(model, x, t, y, 4.0, null)
    torch.testing.assert_close(out[:, :4], uncond[:, :4] + 4.0 * (cond[:, :4] - uncond[:, :4]))
    torch.testing.assert_close(out[:, 4:], cond[:, 4:])
    torch.testing.assert_close(guided_output(model, x, t, y, 1.0, None), cond)
    with pytest.raises(ValueError, match="null_class"):
        guided_output(model, x, t, y, 2.0, None)


def test_samplers_are_deterministic_and_never_switch_mode():
    model = GaussianOracle([0.5, 0.0], [0.5, 1.0], learn_sigma=True,
                           kept=space_timesteps(T, 20)).train()
    y, shape, d = torch.zeros(8, dtype=torch.long), (8, 1, 2, 2), GaussianDiffusion.linear()
    a = ddpm_sample(model, d, shape, y, steps=20, generator=gen(11))
    b = ddpm_sample(model, d, shape, y, steps=20, generator=gen(11))
    c = ddpm_sample(model, d, shape, y, steps=20, generator=gen(12))
    assert torch.equal(a, b) and not torch.allclose(a, c)
    assert torch.equal(ddim_sample(model, d, shape, y, steps=20, eta=0.5, generator=gen(13)),
                       ddim_sample(model, d, shape, y, steps=20, eta=0.5, generator=gen(13)))
    assert model.training  # the caller's mode is left as it was
    clipped = ddpm_sample(model, d, shape, y, steps=20, generator=gen(11), clip_denoised=True)
    assert clipped.abs().max() <= 1.0 + 1e-6  # the last step returns the clipped x0


def test_sampler_input_errors():
    model, d = GaussianOracle([0.0, 0.0], [1.0, 1.0]), GaussianDiffusion.linear()
    with pytest.raises(ValueError, match="y"):
        ddpm_sample(model, d, (4, 1, 2, 2), torch.zeros(3, dtype=torch.long), generator=gen(0))
    with pytest.raises(ValueError, match="eta"):
        ddim_sample(model, d, (4, 1, 2, 2), torch.zeros(4, dtype=torch.long), eta=1.5,
                    generator=gen(0))
    with pytest.raises(ValueError, match="fixed_variance"):
        ddpm_sample(model, d, (4, 1, 2, 2), torch.zeros(4, dtype=torch.long), steps=5,
                    fixed_variance="big", generator=gen(0))
    with pytest.raises(ValueError, match="channels"):
        split_output(torch.zeros(2, 3, 2, 2), 2)


# ---------------------------------------------------------------------------- loss
def test_eps_loss_of_the_oracle_is_the_posterior_variance_of_eps():
    # E ‖ε − E[ε | x_t]‖² per element = Var(ε | x_t) = ᾱσ² / V_t, averaged over t uniform
    mu, sigma = 0.4, 0.5
    model = GaussianOracle([mu, 0.0], [sigma, 1.0])
    d = GaussianDiffusion.linear()
    n = 20000
    x0 = mu + sigma * torch.randn(n, 1, 2, 2, generator=gen(14), dtype=torch.float64)
    y = torch.zeros(n, dtype=torch.long)
    t, noise = draw_timesteps_and_noise(d, x0, gen(15))
    per_sample = loss_terms(d, model, x0, y, t, noise)["mse"]
    expected = float(np.mean(ABAR * sigma ** 2 / (ABAR * sigma ** 2 + 1 - ABAR)))
    se = float(per_sample.std()) / math.sqrt(n)
    assert abs(float(per_sample.mean()) - expected) < 4 * se
    total = diffusion_loss(d, model, x0, y, generator=gen(15))  # same draws: the same mean
    torch.testing.assert_close(total, per_sample.mean(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("step", [1, 10, 500, 999])
def test_vb_term_of_the_oracle_is_half_log_variance_ratio(step):
    # With the exact mean and variance v_p = Var(x_{t-1} | x_t): E KL = ½ log(v_p / β̃_t) nats
    mu, sigma = -0.3, 0.5
    model = GaussianOracle([mu, 0.0], [sigma, 1.0], learn_sigma=True)
    d = GaussianDiffusion.linear()
    n = 4000
    x0 = mu + sigma * torch.randn(n, 1, 2, 2, generator=gen(16), dtype=torch.float64)
    t = torch.full((n,), step)
    noise = torch.randn(x0.shape, generator=gen(17), dtype=torch.float64)
    vb = loss_terms(d, model, x0, torch.zeros(n, dtype=torch.long), t, noise)["vb"]
    a_t, a_s = ABAR[step], ABAR[step - 1]
    var_s, var_t = a_s * sigma ** 2 + 1 - a_s, a_t * sigma ** 2 + 1 - a_t
    true_var = var_s - (a_t / a_s) * var_s ** 2 / var_t
    beta_tilde = BETAS[step] * (1 - a_s) / (1 - a_t)
    expected = 0.5 * math.log(true_var / beta_tilde) / math.log(2)
    assert abs(float(vb.mean()) - expected) < 4 * float(vb.std()) / math.sqrt(n)


def test_vb_term_against_torch_distributions():
    d = GaussianDiffusion.linear()
    n, c = 6, 3
    out = torch.randn(n, 2 * c, 2, 2, generator=gen(18), dtype=torch.float64)
    model = lambda x, t, y: out  # noqa: E731
    x0 = torch.rand(n, c, 2, 2, generator=gen(19), dtype=torch.float64) * 2 - 1
    noise = torch.randn(x0.shape, generator=gen(20), dtype=torch.float64)
    t = torch.tensor([1, 5, 50, 300, 700, 999])
    terms = loss_terms(d, model, x0, None, t, noise)
    a_t = torch.tensor(ABAR[t.numpy()]).view(-1, 1, 1, 1)
    a_s = torch.tensor(ABAR[t.numpy() - 1]).view(-1, 1, 1, 1)
    beta = torch.tensor(BETAS[t.numpy()]).view(-1, 1, 1, 1)
    xt = a_t.sqrt() * x0 + (1 - a_t).sqrt() * noise
    beta_tilde = beta * (1 - a_s) / (1 - a_t)

    def posterior_mean(x_start: Tensor) -> Tensor:
        return (a_s.sqrt() * beta * x_start + (1 - beta).sqrt() * (1 - a_s) * xt) / (1 - a_t)

    eps, v = out[:, :c], out[:, c:]
    x0_hat = (xt - (1 - a_t).sqrt() * eps) / a_t.sqrt()
    log_var = (v + 1) / 2 * beta.log() + (1 - v) / 2 * beta_tilde.log()
    q = torch.distributions.Normal(posterior_mean(x0), beta_tilde.sqrt().expand_as(x0))
    p = torch.distributions.Normal(posterior_mean(x0_hat), (0.5 * log_var).exp())
    kl_bits = torch.distributions.kl_divergence(q, p).mean(dim=(1, 2, 3)) / math.log(2)
    torch.testing.assert_close(terms["vb"], kl_bits, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(terms["mse"], ((noise - eps) ** 2).mean(dim=(1, 2, 3)))
    torch.testing.assert_close(terms["loss"], terms["mse"] + terms["vb"])


def test_vb_trains_only_the_variance_and_mse_only_the_mean():
    n, c = 4, 2
    out = torch.randn(n, 2 * c, 3, 3, generator=gen(21), requires_grad=True)
    model = lambda x, t, y: out  # noqa: E731
    x0 = torch.rand(n, c, 3, 3, generator=gen(22)) * 2 - 1
    d = GaussianDiffusion.linear()
    t, noise = torch.tensor([0, 3, 400, 999]), torch.randn(x0.shape, generator=gen(23))
    (grad_vb,) = torch.autograd.grad(loss_terms(d, model, x0, None, t, noise)["vb"].sum(), out)
    assert torch.all(grad_vb[:, :c] == 0) and torch.all(grad_vb[:, c:].abs().sum((1, 2, 3)) > 0)
    (grad_mse,) = torch.autograd.grad(loss_terms(d, model, x0, None, t, noise)["mse"].sum(), out)
    assert torch.all(grad_mse[:, c:] == 0) and torch.all(grad_mse[:, :c].abs().sum((1, 2, 3)) > 0)


def test_normal_kl_matches_monte_carlo_and_torch():
    m1, lv1 = torch.tensor([0.3, -1.0, 2.0]), torch.tensor([0.0, -2.0, 0.5])
    m2, lv2 = torch.tensor([0.0, -0.5, 1.0]), torch.tensor([0.4, -1.0, 0.0])
    kl = normal_kl(m1.double(), lv1.double(), m2.double(), lv2.double())
    p = torch.distributions.Normal(m1.double(), (0.5 * lv1.double()).exp())
    q = torch.distributions.Normal(m2.double(), (0.5 * lv2.double()).exp())
    torch.testing.assert_close(kl, torch.distributions.kl_divergence(p, q), rtol=1e-12, atol=0)
    n = 200_000
    z = m1.double() + (0.5 * lv1.double()).exp() * torch.randn(n, 3, generator=gen(24),
                                                                dtype=torch.float64)
    ratio = p.log_prob(z) - q.log_prob(z)
    assert torch.all((ratio.mean(0) - kl).abs() < 4 * ratio.std(0) / math.sqrt(n))


@pytest.mark.parametrize(("mean", "log_scale"), [(0.0, -3.0), (0.37, -5.0), (-0.9, -1.0),
                                                 (1.2, 0.0)])
def test_discretized_likelihood_is_a_distribution_over_the_256_levels(mean, log_scale):
    levels = torch.linspace(-1, 1, 256, dtype=torch.float64)
    means = torch.full_like(levels, mean)
    probs = discretized_gaussian_log_likelihood(levels, means, torch.full_like(levels,
                                                                               log_scale)).exp()
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-9)
    # each bin against the exact Φ: off by at most twice the tanh approximation's error
    grid = np.linspace(-10, 10, 200_001)
    approx = 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (grid + 0.044715 * grid ** 3)))
    bound = 2 * np.abs(approx - norm.cdf(grid)).max()
    lower = (levels.numpy() - 1 / 255 - mean) / math.exp(log_scale)
    upper = (levels.numpy() + 1 / 255 - mean) / math.exp(log_scale)
    lower[0], upper[-1] = -np.inf, np.inf  # the end levels own the tails
    exact = norm.cdf(upper) - norm.cdf(lower)
    assert np.abs(probs.numpy() - exact).max() <= bound + 1e-12  # + the floor of the logs


class TinyDenoiser(nn.Module):
    """A conv net with time and class embeddings; ``2 C`` outputs with ``learn_sigma``."""

    def __init__(self, channels: int = 2, learn_sigma: bool = True, classes: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 8, 3, padding=1)
        self.time = nn.Linear(1, 8)
        self.label = nn.Embedding(classes + 1, 8)
        self.out = nn.Conv2d(8, channels * (2 if learn_sigma else 1), 3, padding=1)

    def forward(self, x: Tensor, t: Tensor, y: Tensor) -> Tensor:
        cond = self.time(t.to(x.dtype).view(-1, 1) / 1000) + self.label(y)
        return self.out(torch.tanh(self.conv(x) + cond[:, :, None, None]))


@pytest.mark.parametrize("learn_sigma", [False, True])
def test_gradients_reach_every_parameter(learn_sigma):
    torch.manual_seed(0)
    model = TinyDenoiser(learn_sigma=learn_sigma)
    x0, y = torch.rand(16, 2, 4, 4, generator=gen(25)) * 2 - 1, torch.arange(16) % 3
    loss = diffusion_loss(GaussianDiffusion.linear(), model, x0, y, generator=gen(26))
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_loss_adapter_is_deterministic_and_keeps_evaluation_apart():
    torch.manual_seed(0)
    model = TinyDenoiser()
    x0, y = torch.rand(8, 2, 4, 4, generator=gen(27)) * 2 - 1, torch.arange(8) % 3
    d = GaussianDiffusion.linear()
    a, b, c = DiffusionLoss(d, gen(1)), DiffusionLoss(d, gen(1)), DiffusionLoss(d, gen(2))
    first = a(model, (x0, y))
    assert torch.equal(first, b(model, (x0, y))) and not torch.equal(first, c(model, (x0, y)))
    model.eval()
    a(model, (x0, y))  # drawn from the evaluation generator: training draws unchanged
    model.train()
    assert torch.equal(a(model, (x0, y)), b(model, (x0, y)))
    with pytest.raises(ValueError, match="batch"):
        a(model, (x0,))


# ---------------------------------------------------------------------------- EMA
class Snapshots(Callback):
    """The model's parameters after every update (and before the first)."""

    def __init__(self) -> None:
        super().__init__(every=1)
        self.params: list[list[Tensor]] = []

    def fires(self, step: int) -> bool:
        return True

    def on_step(self, trainer, step, loss) -> None:
        self.params.append([p.detach().clone() for p in trainer.model.parameters()])


def quadratic_batches(step: int) -> tuple[Tensor, Tensor]:
    g = gen(100 + step)
    return (torch.randn(8, 3, generator=g, dtype=torch.float64),
            torch.randn(8, 2, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("start", [0, 2])
def test_ema_follows_the_hand_recurrence(start):
    torch.manual_seed(1)
    model = nn.Linear(3, 2)
    decay = 0.9
    ema, snaps = EMA(model, decay, start=start), Snapshots()
    settings = TrainSettings(optimizer="sgd", lr=0.1, steps=5, dtype="float64")
    Trainer(model, settings, quadratic_batches, loss_fn=lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(),
            callbacks=[ema, snaps]).fit()
    shadow = [p.detach().clone() for p in snaps.params[0]]  # update_ema(ema, model, decay=0)
    for step, params in enumerate(snaps.params[1:], start=1):
        w = 0.0 if step <= start else decay
        shadow = [w * s + (1 - w) * p for s, p in zip(shadow, params)]
    for got, want in zip(ema.module.parameters(), shadow):
        assert got.dtype == torch.float64  # followed the engine's conversion
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    assert not torch.allclose(shadow[0], snaps.params[-1][0])  # the average lags the model
    assert ema.updates == 6
    assert all(not p.requires_grad for p in ema.module.parameters()) and not ema.module.training
    assert all(p.requires_grad for p in model.parameters())


def test_ema_copies_buffers_sized_on_the_first_batch():
    # PercentileLayerNorm sizes its running statistics on the first training batch: the
    # shadow's copy (made before training) must take the new shape, then follow the values.
    from actlab.nn.norms import PercentileLayerNorm

    model = nn.Sequential(nn.Linear(4, 4), PercentileLayerNorm(4, affine=False))
    ema = EMA(model, 0.5)
    model(torch.randn(3, 5, 4))
    ema.update(model)
    norm = ema.module[1]
    assert norm.running_center.shape == (5, 1)
    torch.testing.assert_close(norm.running_center, model[1].running_center)
    model(torch.randn(3, 5, 4))
    ema.update(model)
    torch.testing.assert_close(norm.running_var, model[1].running_var)
    assert int(norm.num_batches_tracked) == 2


def test_ema_rejects_bad_settings():
    with pytest.raises(ValueError, match="decay"):
        EMA(nn.Linear(2, 2), 1.5)
    with pytest.raises(ValueError, match="start"):
        EMA(nn.Linear(2, 2), start=-1)


def _diffusion_run(tmp, steps: int, init_seed: int, loss_seed: int, resume: bool):
    torch.manual_seed(init_seed)
    model = TinyDenoiser()
    data = torch.rand(24, 2, 4, 4, generator=gen(30)) * 2 - 1
    labels = torch.arange(24) % 3
    loss = DiffusionLoss(GaussianDiffusion.linear(), gen(loss_seed))
    ema = EMA(model, 0.8)
    settings = TrainSettings(lr=1e-2, steps=steps, checkpoint_every=2 if tmp else 0)
    trainer = Trainer(model, settings, lambda s: (data[s % 3 * 8:][:8], labels[s % 3 * 8:][:8]),
                      loss_fn=loss, checkpoint_dir=tmp, callbacks=[ema, loss.checkpoint_callback()])
    trainer.fit(resume=resume)
    return model, ema


def test_ema_and_loss_draws_survive_a_checkpoint(tmp_path):
    full_model, full_ema = _diffusion_run(None, 4, init_seed=0, loss_seed=5, resume=False)
    _, first_ema = _diffusion_run(tmp_path, 2, init_seed=0, loss_seed=5, resume=False)
    # a fresh run with other weights and another loss seed, resumed with nothing left to do
    _, restored = _diffusion_run(tmp_path, 2, init_seed=9, loss_seed=6, resume=True)
    for a, b in zip(restored.module.state_dict().values(), first_ema.module.state_dict().values()):
        assert torch.equal(a, b)
    assert restored.updates == first_ema.updates == 3
    resumed_model, resumed_ema = _diffusion_run(tmp_path, 4, init_seed=9, loss_seed=6, resume=True)
    for a, b in zip(resumed_model.parameters(), full_model.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(resumed_ema.module.parameters(), full_ema.module.parameters()):
        assert torch.equal(a, b)


def test_train_diffusion_recipe_is_deterministic():
    data = torch.rand(32, 2, 4, 4, generator=gen(40)) * 2 - 1
    labels = torch.arange(32) % 3
    settings = TrainSettings(lr=1e-2, steps=6, batch_size=8)

    def run(seed: int):
        torch.manual_seed(0)
        model = TinyDenoiser()
        return model, train_diffusion(model, data, labels, settings, ema_decay=0.5, seed=seed)

    model_a, a = run(3)
    model_b, b = run(3)
    _, c = run(4)
    assert a.result.status == "ok" and a.result.step == 6 and len(a.losses) == 6
    assert a.losses == b.losses and a.losses != c.losses
    assert all(torch.equal(p, q) for p, q in zip(model_a.parameters(), model_b.parameters()))
    assert a.ema is not model_a and not a.ema.training
    assert not any(torch.equal(p, q) for p, q in zip(a.ema.parameters(), model_a.parameters()))
    with pytest.raises(ValueError, match="labels"):
        train_diffusion(TinyDenoiser(), data, labels[:5], settings)
