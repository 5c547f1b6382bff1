"""Plain and gated FFN blocks: structure, parameter counts, FLOPs."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from actlab.nn.ffn import (
    FFN,
    GatedFFN,
    ffn_flops_per_token,
    ffn_param_count,
    gated_ffn,
    matched_width,
)


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_handbook_example_d6_m12() -> None:
    g = matched_width(6, 12)
    assert g == 8
    plain = FFN(6, 12, bias=False)
    gated = GatedFFN(6, g)
    assert _params(plain) == _params(gated) == 144
    assert ffn_param_count(6, 12, bias=False) == ffn_param_count(6, 8, gated=True) == 144


@pytest.mark.parametrize(("d", "m", "multiple_of"), [(6, 12, 1), (64, 256, 1), (64, 256, 8),
                                                     (10, 7, 1), (768, 3072, 256)])
@pytest.mark.parametrize("bias", [False, True])
def test_param_count_matches_modules_and_width_is_matched(d, m, multiple_of, bias) -> None:
    g = matched_width(d, m, multiple_of, bias=bias)
    assert g % multiple_of == 0
    plain = FFN(d, m, bias=bias)
    gated = GatedFFN(d, g, bias=bias)
    assert ffn_param_count(d, m, bias=bias) == _params(plain)
    assert ffn_param_count(d, g, gated=True, bias=bias) == _params(gated)
    # the matched width is the best multiple: no other multiple gets closer
    target = _params(plain)
    for other in (g - multiple_of, g + multiple_of):
        if other >= 1:
            assert abs(ffn_param_count(d, other, gated=True, bias=bias) - target) >= \
                abs(_params(gated) - target)


def test_defaults_plain_has_bias_gated_not() -> None:
    assert ffn_param_count(4, 8) == _params(FFN(4, 8)) == 2 * 32 + 8 + 4
    assert ffn_param_count(4, 8, gated=True) == _params(GatedFFN(4, 8)) == 3 * 32


@pytest.mark.parametrize("gated", [False, True])
def test_flops_match_torch_flop_counter(gated: bool) -> None:
    d, h, tokens = 12, 20, 5
    module = GatedFFN(d, h) if gated else FFN(d, h, bias=False)
    x = torch.randn(tokens, d)
    with FlopCounterMode(display=False) as counter:
        module(x)
    # torch counts the matrix products (2 FLOPs per multiply-add); we add the gating product
    matmul_flops = counter.get_total_flops() // tokens
    extra = h if gated else 0
    assert ffn_flops_per_token(d, h, gated=gated, bias=False) == matmul_flops + extra
    assert ffn_flops_per_token(d, h, gated=gated, bias=True) == \
        matmul_flops + extra + ((2 if gated else 1) * h + d)


def test_gated_forward_and_named_variants() -> None:
    torch.manual_seed(0)
    for kind, gate in [("glu", torch.sigmoid), ("reglu", torch.relu),
                       ("geglu", torch.nn.functional.gelu), ("swiglu", torch.nn.functional.silu)]:
        block = getattr(GatedFFN, kind)(6, 8)
        same = gated_ffn(kind.upper(), 6, 8)
        assert block.act.spec == same.act.spec
        x = torch.randn(3, 6)
        expected = block.down(gate(block.gate_proj(x)) * block.up(x))
        assert torch.allclose(block(x), expected)
    custom = GatedFFN(6, 8, gate="gelu:adaptive")
    assert custom.act.spec == "gelu:adaptive"
    plain = FFN(6, 12, activation="relu:shift=theory")
    x = torch.randn(3, 6)
    assert torch.allclose(plain(x), plain.down(torch.relu(plain.up(x)) - plain.act.shift))
    with pytest.raises(ValueError, match="'swiglu'"):
        gated_ffn("swigly", 6, 8)
    with pytest.raises(ValueError, match="hidden"):
        FFN(6, 0)
