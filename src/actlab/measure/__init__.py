"""Measures of models and of their results.

* :mod:`~actlab.measure.signal`: signal sizes, gradient norms, saturation and dead units of deep
  stacks;
* :mod:`~actlab.measure.fid`: FID and IS from feature and logit arrays, always named with the
  feature network that produced them ("FID (digits-classifier features)");
* :mod:`~actlab.measure.feature_network`, :mod:`~actlab.measure.feature_classifier` (the offline
  default: a small digits classifier trained once and cached) and
  :mod:`~actlab.measure.inception` (the FID variant of Inception-v3, for a weights file the
  user supplies);
* :mod:`~actlab.measure.fid_statistics`: FID and IS statistics accumulated in batches and
  merged across ranks, and reference statistics (image folders, guided-diffusion's .npz);
* :mod:`~actlab.measure.vae`: latent samples decoded by the Stable Diffusion VAE
  (``diffusers``' ``AutoencoderKL`` from a local folder).

Names are imported on first use.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "SignalProfile": ".signal",
    "dead_unit_share": ".signal",
    "signal_profile": ".signal",
    "frechet_distance": ".fid",
    "generative_metrics": ".fid",
    "inception_score": ".fid",
    "FeatureNetwork": ".feature_network",
    "digits_feature_network": ".feature_classifier",
    "inception_v3_fid": ".inception",
    "FeatureMoments": ".fid_statistics",
    "InceptionScoreParts": ".fid_statistics",
    "ReferenceStatistics": ".fid_statistics",
    "reference_statistics": ".fid_statistics",
    "LatentDecoder": ".vae",
    "latent_decoder": ".vae",
    "load_autoencoder": ".vae",
})
