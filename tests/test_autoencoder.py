"""ConvAutoencoder shapes, the eq. 8 bias decomposition, component decoding, image similarity."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from actlab.nn.autoencoder import ConvAutoencoder, bias_decomposition, image_similarity


def _close(actual, expected, rtol: float = 0.0, atol: float = 1e-12) -> None:
    """Elementwise ``|actual - expected| <= atol + rtol |expected|`` (tensors or arrays)."""
    actual = torch.as_tensor(actual).detach()
    expected = torch.as_tensor(expected, dtype=actual.dtype).detach()
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def _model(activation: str = "relu", in_channels: int = 1, dtype=torch.float64,
           widths=(4, 8), seed: int = 0) -> ConvAutoencoder:
    torch.manual_seed(seed)
    return ConvAutoencoder(in_channels, widths, convs_per_stage=2, activation=activation).to(dtype)


@pytest.mark.parametrize(("in_channels", "size", "widths"), [(1, 16, (4, 8)), (3, 32, (4, 6, 8))])
def test_shapes_of_latent_and_reconstruction(in_channels, size, widths):
    model = _model(in_channels=in_channels, widths=widths)
    x = torch.randn(5, in_channels, size, size, dtype=torch.float64)
    h = model.encode(x)
    down = 2 ** (len(widths) - 1)
    assert h.shape == (5, widths[-1], size // down, size // down)
    assert model.latent_channels == widths[-1]
    assert model(x).shape == x.shape
    # The latent is post-activation: plain ReLU output is never negative
    assert float(h.detach().min()) >= 0.0 and float(h.detach().max()) > 0.0
    with pytest.raises(ValueError, match="images"):
        model.encode(torch.randn(5, in_channels + 1, size, size, dtype=torch.float64))
    with pytest.raises(ValueError, match="divisible"):
        model.encode(torch.randn(2, in_channels, size + 1, size + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="latent"):
        model.decode(torch.randn(2, widths[-1] + 1, 4, 4, dtype=torch.float64))


def test_every_activation_follows_the_spec():
    plain, shifted = _model("relu"), _model("relu:shift=0.23")
    # same seed, parameter-free activations: identical weights
    for p, q in zip(plain.parameters(), shifted.parameters()):
        assert torch.equal(p, q)
    x = torch.randn(3, 1, 16, 16, dtype=torch.float64)
    z = shifted.encoder[:-1](x)  # the last convolution's output
    _close(shifted.encode(x), torch.relu(z) - 0.23, rtol=0, atol=1e-12)
    assert float(shifted.encode(x).detach().min()) >= -0.23 - 1e-12
    acts = [m for m in shifted.modules() if type(m).__name__ == "SpecActivation"]
    assert len(acts) == 2 * 2 + 2  # 2 stages x 2 convs in the encoder, 2 in the decoder


def test_decomposition_matches_dense_eq8_and_sums_back():
    torch.manual_seed(1)
    h = torch.rand(3, 7, 4, 5, dtype=torch.float64)
    h_bias, h_dev = bias_decomposition(h)
    # dense reference: the mean over channels at every location, written out by loops
    ref = torch.empty_like(h)
    for n in range(3):
        for i in range(4):
            for j in range(5):
                ref[n, :, i, j] = sum(float(h[n, c, i, j]) for c in range(7)) / 7
    _close(h_bias, ref, rtol=0, atol=1e-15)
    _close(h_bias + h_dev, h, rtol=0, atol=1e-15)
    _close(h_dev.mean(1), torch.zeros(3, 4, 5, dtype=torch.float64),
                               rtol=0, atol=1e-15)
    assert h_bias.is_contiguous() and h_bias.data_ptr() != h.data_ptr()
    # eq. 8 is an orthogonal split: the two parts are orthogonal at every location
    _close((h_bias * h_dev).sum(1), torch.zeros(3, 4, 5, dtype=torch.float64),
                               rtol=0, atol=1e-14)
    # another channel dimension (token features last)
    tokens = torch.randn(2, 6, 9, dtype=torch.float64)
    b, d = bias_decomposition(tokens, dim=-1)
    _close(b[..., 0], tokens.mean(-1), rtol=0, atol=1e-15)
    _close(d.sum(-1), torch.zeros(2, 6, dtype=torch.float64), atol=1e-14)


def test_decomposition_gradients_match_finite_differences():
    h = torch.randn(2, 5, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: bias_decomposition(t), (h,))
    # analytic backward of sum(w * h_bias): each channel receives the channel mean of w
    w = torch.randn(2, 5, 3, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad((w * bias_decomposition(h)[0]).sum(), h)
    _close(grad, w.mean(1, keepdim=True).expand_as(w), atol=1e-14)


def test_reconstruct_parts_decode_each_component():
    model = _model("relu:shift=theory")
    x = torch.randn(4, 1, 16, 16, dtype=torch.float64)
    parts = model.reconstruct_parts(x)
    assert set(parts) == {"full", "bias", "dev"}
    _close(parts["full"], model(x), rtol=0, atol=1e-12)
    h = model.encode(x)
    m = h.mean(1, keepdim=True)
    _close(parts["bias"], model.decode(m.repeat(1, h.shape[1], 1, 1)),
                               rtol=0, atol=1e-12)
    _close(parts["dev"], model.decode(h - m), rtol=0, atol=1e-12)
    # the decoder is not additive: the parts' images do not sum to the full reconstruction
    assert not torch.allclose(parts["bias"] + parts["dev"], parts["full"], atol=1e-6)
    # the bias-only image depends on x only through the channel means of h
    h2 = h.clone()
    h2[:, 0] += 1.0
    h2[:, 1] -= 1.0  # same channel means, different deviation
    _close(model.decode(bias_decomposition(h2)[0]), parts["bias"], atol=1e-12)
    # gradients reach the encoder through each part
    model.zero_grad()
    parts["bias"].pow(2).sum().backward()
    first = model.encoder[0].weight.grad
    assert first is not None and float(first.abs().sum()) > 0


def test_image_similarity_against_references():
    torch.manual_seed(2)
    a = torch.randn(6, 3, 4, 4, dtype=torch.float64)
    b = 0.5 * a + 0.3 * torch.randn(6, 3, 4, 4, dtype=torch.float64)
    corr = image_similarity(a, b, "correlation")
    for i in range(6):
        expected = np.corrcoef(a[i].flatten().numpy(), b[i].flatten().numpy())[0, 1]
        assert abs(float(corr[i]) - expected) < 1e-12
    _close(image_similarity(a, b, "cosine"),
                               F.cosine_similarity(a.flatten(1), b.flatten(1)), atol=1e-12)
    mse = (a - b).pow(2).flatten(1).mean(1)
    peak = b.flatten(1).amax(1) - b.flatten(1).amin(1)
    _close(image_similarity(a, b, "psnr"),
                               10 * np.log10((peak ** 2 / mse).numpy()), atol=1e-10)
    # correlation ignores brightness and contrast; cosine does not
    _close(image_similarity(a, 2 * a + 3), torch.ones(6, dtype=torch.float64),
                               atol=1e-12)
    assert float(image_similarity(a, 2 * a + 3, "cosine").max()) < 0.99
    const = torch.full_like(a, 0.7)
    assert float(image_similarity(const, a).abs().max()) < 1e-12
    with pytest.raises(ValueError, match="correlation"):
        image_similarity(a, b, "corelation")
    with pytest.raises(ValueError, match="same shape"):
        image_similarity(a, b[:3])


def test_image_similarity_gradient():
    a = torch.randn(3, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 1, 4, 4, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: image_similarity(t, b, "correlation"), (a,))
    assert torch.autograd.gradcheck(lambda t: image_similarity(t, b, "psnr"), (a,))


def test_bad_construction_arguments():
    with pytest.raises(ValueError, match="widths"):
        ConvAutoencoder(1, ())
    with pytest.raises(ValueError, match="convs_per_stage"):
        ConvAutoencoder(1, (4,), convs_per_stage=0)
    with pytest.raises(ValueError):
        ConvAutoencoder(1, (4,), activation="rleu")
