"""``actlab plan``: the forward FLOPs of :mod:`actlab.nn.flops` against
``torch.utils.flop_counter.FlopCounterMode`` on every model family actlab prices, saved
activations and optimizer state against closed forms, the plan's arithmetic, the published
sizes of GPT-2 Small and the DiTs, and the command's table, JSON and errors."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from actlab.nn.flops import forward_cost, saved_activation_bytes
from actlab.runner.cost import ACCELERATORS, Workload, optimizer_state_bytes, price

import _toy_experiments as toy


def _torch_count(model: nn.Module, *inputs) -> int:
    """PyTorch's count of the same forward pass (the math attention kernel, which it sees)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*inputs)
    return counter.get_total_flops()


class _Explicit(nn.Module):
    """Products written out: ``@``, ``torch.bmm``, ``torch.addmm`` and a grouped conv."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))
        self.conv = nn.Conv2d(4, 8, 3, groups=2, padding=1)

    def forward(self, x: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        h = x @ self.w  # (3, 7, 5)
        h = torch.bmm(h, h.transpose(1, 2))  # (3, 7, 7)
        flat = torch.addmm(torch.zeros(7, 5), h[0], x[0, :, :5])
        return h.sum() + flat.sum() + self.conv(image).sum()


def _families() -> dict[str, tuple[nn.Module, tuple]]:
    from actlab.nn.autoencoder import ConvAutoencoder
    from actlab.nn.dit import DiT, DiTConfig
    from actlab.nn.gpt import GPT, GPTConfig
    from actlab.nn.maxvit import MaxViT, small_maxvit_config
    from actlab.nn.mlp import MLP
    from actlab.nn.residual_mlp import ResidualMLP
    from actlab.nn.resnet import ResNet
    from actlab.nn.vit import ViT

    g = torch.Generator().manual_seed(0)
    dit = DiTConfig(input_size=8, patch_size=2, in_channels=4, hidden_size=16, depth=2,
                    num_heads=4, num_classes=10)
    return {
        "gpt": (GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=100, block_size=16)),
                (torch.randint(0, 100, (3, 16), generator=g),)),
        "gpt-swiglu": (GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, vocab_size=50,
                                     block_size=8, ffn="swiglu", bias=False)),
                       (torch.randint(0, 50, (2, 8), generator=g),)),
        "dit": (DiT(dit, seed=0), (torch.randn(3, 4, 8, 8, generator=g),
                                   torch.randint(0, 1000, (3,), generator=g),
                                   torch.randint(0, 10, (3,), generator=g))),
        "vit": (ViT(image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=32, depth=2,
                    heads=2), (torch.randn(3, 1, 8, 8, generator=g),)),
        "resnet": (ResNet(3, 10, widths=(8, 16), blocks=1), (torch.randn(3, 3, 16, 16, generator=g),)),
        "maxvit": (MaxViT(small_maxvit_config(16, 3, 10)),
                   (torch.randn(2, 3, 16, 16, generator=g),)),
        "mlp": (MLP(64, 10, hidden=32, depth=3, activation="relu"),
                (torch.randn(5, 64, generator=g),)),
        "residual-mlp": (ResidualMLP(5, 20, 3), (torch.randn(7, 5, generator=g),)),
        "autoencoder": (ConvAutoencoder(1, widths=(4, 8)), (torch.randn(2, 1, 8, 8, generator=g),)),
        "explicit": (_Explicit(), (torch.randn(3, 7, 6, generator=g),
                                   torch.randn(2, 4, 5, 5, generator=g))),
    }


@pytest.mark.parametrize("family", sorted(_families()))
def test_forward_flops_match_torchs_flop_counter(family, one_thread):
    model, inputs = _families()[family]
    model.eval()
    flops, _ = forward_cost(model, *inputs)
    assert flops > 0 and flops == _torch_count(model, *inputs)


def test_a_learned_attention_bias_is_priced_on_the_meta_device():
    # MaxViT's relative-position bias is a mask that needs its gradient, which the fused
    # kernel pricing attention on meta does not take: the same FLOPs as on the CPU
    from actlab.nn.maxvit import MaxViT, small_maxvit_config

    x = torch.randn(2, 3, 16, 16)
    on_cpu, _ = forward_cost(MaxViT(small_maxvit_config(16, 3, 10)), x)
    with torch.device("meta"):
        model = MaxViT(small_maxvit_config(16, 3, 10))
    on_meta, saved = forward_cost(model, x.to("meta"))
    assert on_meta == on_cpu and saved > 0


def test_the_count_is_the_same_on_the_meta_device():
    from actlab.nn.gpt import GPT, GPTConfig

    config = GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=100, block_size=16)
    idx = torch.zeros(3, 16, dtype=torch.long)
    on_cpu, saved_cpu = forward_cost(GPT(config), idx)
    with torch.device("meta"):
        model = GPT(config)
    on_meta, saved_meta = forward_cost(model, idx.to("meta"))
    assert (on_meta, saved_meta) == (on_cpu, saved_cpu)


def test_saved_activations_of_an_mlp_are_its_input_and_hidden_layer():
    # Linear -> ReLU -> Linear without biases: backward needs the input (for the first
    # weight's gradient) and the ReLU's output (its own mask and the second weight's
    # gradient, one tensor); the weights are parameters, counted apart.
    batch, d_in, hidden = 5, 12, 7
    model = nn.Sequential(nn.Linear(d_in, hidden, bias=False), nn.ReLU(),
                          nn.Linear(hidden, 3, bias=False))
    x = torch.randn(batch, d_in)
    saved = saved_activation_bytes(model, lambda: model(x).sum())
    assert saved == 4 * batch * (d_in + hidden)
    with torch.no_grad():  # nothing is kept without autograd
        assert saved_activation_bytes(model, lambda: model(x)) == 0


def test_optimizer_state_is_per_parameter_and_muon_splits_matrices():
    from actlab.nn.gpt import GPT, GPTConfig

    c = GPTConfig(n_layer=2, n_head=2, n_embd=16, vocab_size=40, block_size=8)
    model = GPT(c)
    n = sum(p.numel() for p in model.parameters())
    assert optimizer_state_bytes(model, "adamw") == 8 * n
    assert optimizer_state_bytes(model, "nesterov") == 4 * n
    assert optimizer_state_bytes(model, "sgd") == 0
    # Muon keeps one momentum buffer on the blocks' matrices (qkv 3d², projection d², FFN
    # 2 x 4d²), AdamW two on everything else
    matrices = c.n_layer * 12 * c.n_embd ** 2
    assert optimizer_state_bytes(model, "muon") == 4 * matrices + 8 * (n - matrices)
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimizer_state_bytes(model, "lion")


def test_price_is_the_closed_form_of_an_mlp():
    d_in, hidden, d_out, batch, steps = 10, 20, 4, 8, 100

    def build() -> nn.Module:
        return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))

    work = Workload("mlp", build, lambda n: (torch.empty(n, d_in),), steps, batch, "adam",
                    models=2, eval_samples=50)
    h100 = ACCELERATORS["h100"]
    cost = price(work, unit="u", seeds=3, accelerator=h100, mfu=0.5, nproc=2)
    forward = 2 * (d_in * hidden + hidden * d_out)  # per sample
    params = d_in * hidden + hidden + hidden * d_out + d_out
    assert cost.params == params and cost.per_gpu_batch == batch // 2
    assert cost.flops_per_step == 3 * forward * batch
    assert cost.total_flops == 6 * (steps * 3 * forward * batch + 50 * forward)
    assert cost.gpu_hours == pytest.approx(cost.total_flops / (989.5e12 * 0.5) / 3600)
    assert cost.weights_gb == cost.gradients_gb == 4 * params / 1e9
    assert cost.optimizer_gb == 8 * params / 1e9
    assert cost.activations_gb == 4 * (batch // 2) * (d_in + hidden) / 1e9
    assert cost.checkpoint_gb == pytest.approx(6 * 12 * params / 1e9)
    assert cost.memory_gb == pytest.approx((16 * params + 4 * 4 * (d_in + hidden)) / 1e9)
    teacher = Workload("teacher", build, work.example, steps, batch, "adam", trained=False,
                       eval_samples=1000)
    fixed = price(teacher, unit="u", seeds=1, accelerator=h100, mfu=0.5)
    assert fixed.total_flops == 1000 * forward and fixed.checkpoint_gb == 0
    assert fixed.memory_gb == fixed.weights_gb


def test_the_published_sizes_of_gpt2_small_and_the_dits(tmp_path):
    from actlab.experiments.lm_paper import GPT2_SMALL
    from actlab.nn.dit import DiT, dit_config
    from actlab.nn.gpt import GPT, GPTConfig

    # GPT-2 Small as nanoGPT builds it: "GPT-2 (124M)" (karpathy/nanoGPT config/train_gpt2.py);
    # per token forward + backward against nanoGPT's estimate_mfu (model.py): 6N + 12 L H Q T,
    # N without the position embeddings (it also counts the LayerNorm parameters as products)
    shape = {k: GPT2_SMALL.settings[k].value for k in ("n_layer", "n_head", "n_embd",
                                                        "vocab_size", "block_size", "bias")}
    with torch.device("meta"):
        gpt = GPT(GPTConfig(**shape))
    idx = torch.zeros(1, 1024, dtype=torch.long, device="meta")
    flops, _ = forward_cost(gpt, idx)
    n = sum(p.numel() for p in gpt.parameters())
    assert round(n / 1e6) == 124
    layers, heads, width, context = 12, 12, 768, 1024
    nanogpt = 6 * (n - context * width) + 12 * layers * heads * (width // heads) * context
    assert 3 * flops / context == pytest.approx(nanogpt, rel=3e-4)
    # The DiT paper (Peebles & Xie, 2023), Table 4: Gflops per forward pass counting a
    # multiply-add once, and parameters in millions; ours counts products only, theirs
    # differs by less than 0.1 % (6.056 / 6.06, 23.005 / 23.01, 118.62 / 118.64)
    for name, gflops, millions in (("DiT-S/2", 6.06, 33), ("DiT-B/2", 23.01, 130),
                                   ("DiT-XL/2", 118.64, 675)):
        with torch.device("meta"):
            dit = DiT(dit_config(name))
            inputs = (torch.empty(1, 4, 32, 32), torch.zeros(1, dtype=torch.long),
                      torch.zeros(1, dtype=torch.long))
        flops, _ = forward_cost(dit.eval(), *inputs)
        assert flops / 2e9 == pytest.approx(gflops, rel=1e-3), name
        assert round(sum(p.numel() for p in dit.parameters()) / 1e6) == millions, name


@pytest.mark.xdist_group("processes")
def test_plan_prints_a_table_and_json_and_refuses_bad_options():
    table = toy.invoke("plan", "teacher-student", "--paper")
    assert table.exit_code == 0, table.output
    assert "total" in table.output and "a multiply-add is 2 FLOPs" in table.output
    assert "NVIDIA H100 SXM at 989.5 TFLOP/s" in table.output
    out = toy.invoke("plan", "teacher-student", "--paper", "--json")
    plan = json.loads(out.output)
    assert plan["scale"] == "paper" and plan["accelerator"]["peak_flops"] == 989.5e12
    assert len(plan["units"]) == 8  # four activations: students and teacher of each
    students = plan["units"][0]
    assert students["models"] == 16 and students["steps"] == 8000 and students["params"] > 0
    total = plan["total"]
    assert total["total_flops"] == pytest.approx(sum(u["total_flops"] for u in plan["units"]))
    assert total["gpu_hours"] == pytest.approx(sum(u["gpu_hours"] for u in plan["units"]))
    a100 = json.loads(toy.invoke("plan", "teacher-student", "--paper", "--json",
                                 "--accelerator", "a100", "--mfu", "0.5").output)
    assert a100["total"]["gpu_hours"] == pytest.approx(
        total["gpu_hours"] * (989.5e12 * 0.4) / (312e12 * 0.5))
    quick = json.loads(toy.invoke("plan", "teacher-student", "--quick", "--seeds", "2",
                                  "--set", "steps=10", "--json").output)
    assert quick["units"][0]["steps"] == 10 and quick["units"][0]["models"] == 4
    for args, text in ((("--accelerator", "h10"), "did you mean h100"),
                       (("--mfu", "1.5"), "--mfu"), (("--nproc", "0"), "--nproc")):
        bad = toy.invoke("plan", "teacher-student", *args)
        assert bad.exit_code == 2 and text in bad.stderr and "\n" not in bad.stderr.strip()
    none = toy.invoke("plan", "signal")
    assert none.exit_code == 2 and "no cost model" in none.stderr


def test_memory_per_gpu_falls_with_nproc_and_the_note_says_when_it_does_not_fit(tmp_path):
    from actlab.data.latents import write_latent_shard
    from actlab.runner.cost import plan_cost
    from actlab.runner.experiment import get_experiment
    from actlab.runner.plan import make_plan

    labels = torch.tensor([0, 999])  # ImageNet's 1000 classes
    write_latent_shard(tmp_path / "s.safetensors", torch.zeros(2, 4, 32, 32), labels)
    plan = make_plan(get_experiment("dit-shift"), "paper", {"data": str(tmp_path)}, n_seeds=1)
    one, eight = (plan_cost(plan, nproc=n).rows[0] for n in (1, 8))
    assert (one.per_gpu_batch, eight.per_gpu_batch) == (256, 32)
    assert eight.activations_gb == pytest.approx(one.activations_gb / 8, rel=1e-6)
    assert eight.total_flops == one.total_flops and eight.gpu_hours == one.gpu_hours
    state = one.weights_gb + one.gradients_gb + one.optimizer_gb + one.ema_gb
    assert state == pytest.approx(20 * one.params / 1e9)  # AdamW and the EMA: 4+4+8+4 B
    tight = plan_cost(plan, nproc=1, accelerator="h100")
    tight.accelerator = type(tight.accelerator)("small", 1e15, one.memory_gb / 2, "test")
    assert tight.table()[-1].startswith("note: a unit needs")
    assert not plan_cost(plan, nproc=8).table()[-1].startswith("note:")


@pytest.mark.parametrize("name", ["teacher-student", "shift-sweep", "size-sweep", "ablations",
                                  "lm-shift", "spikes", "lm-drift", "dit-shift",
                                  "dit-percentile", "vit-shift", "drift", "sparsity",
                                  "sparse-activations", "relufication", "accumulation-stop"])
def test_every_experiment_with_a_preset_is_priced_at_its_quick_scale_too(name):
    from actlab.runner.cost import plan_cost
    from actlab.runner.experiment import get_experiment
    from actlab.runner.plan import make_plan

    plan = make_plan(get_experiment(name), "quick", n_seeds=1)
    cost = plan_cost(plan)
    assert len({row.unit for row in cost.rows}) == len(plan.units)
    assert all(row.params > 0 and row.total_flops > 0 and row.memory_gb > 0
               for row in cost.rows)
