"""Every experiment's units run on the ``meta`` device: device bugs found without a GPU.

Each built-in experiment runs all its quick-scale units (one seed) with ``meta`` as the unit's
device, inside :class:`MetaReads` (see ``_meta_harness``). A tensor left on the CPU inside the
unit's computation raises the same error there as on CUDA. The test also asserts that the
unit's heavy work really ran on ``meta`` (an experiment that silently ignored the device
would do its matrix products on the CPU), and that no random operation used a generator
on another device than its tensors (``meta`` accepts that silently; CUDA does not).

CI runs one unit per code path (see ``PATH_FIELDS``); ``ACTLAB_META_ALL_UNITS=1`` runs every
unit (about 7 minutes).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

from actlab.runner.config import build_config
from actlab.runner.experiment import UnitContext, get_experiment, list_experiments
from actlab.runner.plan import scale_overrides
from actlab.train.placement import on_device, unit_device

from _meta_harness import META, MetaReads

# Quick scale, shortened further where the quick protocol is long on the CPU side (the meta
# device makes tensor work free, not data loading, Python loops or numpy analysis).
SHORTER: dict[str, dict] = {
    "teacher-student": {"steps": 60, "curvature_points": 1, "curvature_seeds": 1,
                        "landscape_points": 3},
    "ablations": {"steps": 60},
    "shift-sweep": {"steps": 40},
    "size-sweep": {"steps": 40},
    "dead-units": {"epochs": 3},
    "init-study": {"epochs": 4, "late_window": 2},
    "vit-shift": {"steps": 20, "log_points": 3},
    "bias-component": {"steps": 30},
    "lm-shift": {"steps": 20, "eval_every": 10, "probe_every": 10},
    "spikes": {"steps": 20, "eval_every": 10},
    "gated-ffn": {"steps": 20, "eval_every": 10, "timing_repeats": 1},
    "drift": {"steps": 30},
    "drift-theory": {"samples": 1000, "chunk": 500, "theory_networks": 2, "cov_networks": 2},
    "accumulation-stop": {"steps": 20, "warmup": 10},
    "relufication": {"steps": 20, "finetune_epochs": 1},
    "sparsity": {"steps": 20, "topk_freeze_after": 10},
    "sparse-activations": {"steps": 20},
    "relufy-pretrained": {"steps": 4, "n_eval_texts": 4, "n_train_texts": 16},
    "pretrained-profile": {"n_texts": 4},
    "pitfalls": {"epochs": 3},
    "gn-bounds": {"steps": 20, "log_points": 2, "sweep_points": 3, "refine_steps": 1},
    "lm-drift": {"steps": 20, "probe_every": 10},
    "dit-shift": {"steps": 6, "log_points": 2, "eval_points": 1, "fid_samples": 20,
                  "sample_steps": 2, "loss_samples": 16},
    "dit-percentile": {"steps": 6, "log_points": 2, "eval_points": 1, "fid_samples": 20,
                       "sample_steps": 2, "loss_samples": 16},
}


# Unit fields that choose a code path (a model family, a part of the protocol); units that
# differ only in other fields (activation, level, size) run the same code.
PATH_FIELDS = ("model", "part", "demo", "variant", "setup", "method", "norm", "data", "skip",
               "optimizer", "condition")
ALL_UNITS = os.environ.get("ACTLAB_META_ALL_UNITS") == "1"


def _covering_units(units: list[dict]) -> list[dict]:
    """Units until every value of every path field has run once (all with ACTLAB_META_ALL_UNITS=1)."""
    if ALL_UNITS:
        return units
    seen: set[tuple[str, str]] = set()
    chosen = []
    for unit in units:
        values = {(k, str(unit[k])) for k in PATH_FIELDS if k in unit}
        if not chosen or values - seen:
            chosen.append(unit)
            seen |= values
    return chosen


def _built_in() -> list[str]:
    return sorted(n for n, c in list_experiments().items()
                  if c.__module__.startswith("actlab.experiments"))


def _config(experiment):
    overrides = dict(scale_overrides(experiment, "quick"))
    fields = set(getattr(experiment.Config, "__dataclass_fields__", {}))
    overrides.update({k: v for k, v in SHORTER.get(experiment.name, {}).items() if k in fields})
    return build_config(experiment.Config, overrides)


@pytest.mark.parametrize("name", _built_in())
@pytest.mark.slow
def test_every_unit_runs_on_the_units_device(name, tmp_path):
    experiment = get_experiment(name)
    config = _config(experiment)
    device = torch.device("cpu") if experiment.host_only else META
    mode = MetaReads()
    for unit in _covering_units(experiment.units(config)):
        ctx = UnitContext(workdir=tmp_path, device=device)
        with mode, on_device(device):
            result = experiment.run_unit(config, dict(unit), [0], ctx)
        assert result.status in ("ok", "diverged"), (unit, result.error)
    assert not mode.generator_mismatches, mode.generator_mismatches[:3]
    if experiment.host_only:
        assert mode.heavy["meta"] == 0
        return
    assert mode.heavy["meta"] > 0, "no matrix product ran on the unit's device"
    assert not mode.heavy_on_cpu, mode.heavy_on_cpu.most_common(3)


def test_the_harness_sees_work_left_on_the_cpu_and_foreign_generators():
    # A unit that builds its model on the CPU and never places it: the harness must notice.
    mode = MetaReads()
    with mode, on_device(META):
        model = nn.Linear(4, 4)  # not placed
        model(torch.randn(2, 4))
        torch.empty(3, device=unit_device()).normal_(generator=torch.Generator())
    assert mode.heavy["cpu"] == 1 and mode.heavy["meta"] == 0
    assert len(mode.generator_mismatches) == 1


def test_the_harness_reads_meta_values_as_placeholders():
    with MetaReads():
        x = torch.empty(3, device=META)
        assert float(x.sum()) == 0.5 and x.tolist() == [0.0, 0.0, 0.0]
        assert bool((x > 0).any()) is False


def test_experiments_never_move_tensors_themselves():
    # Placement is the engine's and the data modules' job (actlab.train.placement); an
    # experiment may change a dtype, not a device.
    import re

    root = Path(__file__).resolve().parent.parent / "src" / "actlab" / "experiments"
    move = re.compile(r"\.(cuda|cpu)\(|\.to\((?!dtype|torch\.(float|bfloat|double|long|int))"
                      r"(?![a-z_]*\.dtype)")
    offenders = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), start=1)
                 if move.search(line) and "numpy()" not in line]
    assert not offenders, offenders
