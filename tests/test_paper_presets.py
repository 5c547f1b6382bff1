"""``--paper``: every preset's values name their source and build a valid config; a preset
built on another shares its settings; the data set is given by ``--set data=PATH`` and
refused in one line without it; every preset walked on the meta device at the papers' size;
a few steps of each on tiny data in the on-disk formats the loaders read (nanoGPT's raw
token shards, modded-nanogpt's headed FineWeb shards, latent ``.safetensors`` and ``.npy``
shards); config.json records every value's source; ``run --list`` marks the presets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from actlab.errors import ConfigError
from actlab.runner.config import build_config
from actlab.runner.experiment import UnitContext, get_experiment, list_experiments
from actlab.runner.paper import PaperPreset, Setting, paper_overrides
from actlab.runner.plan import make_plan, scale_overrides
from actlab.train.placement import on_device

import _toy_experiments as toy
from _meta_harness import META, MetaReads

PRESETS = ("teacher-student", "shift-sweep", "size-sweep", "ablations", "lm-shift", "spikes",
           "lm-drift", "dit-shift", "dit-percentile", "vit-shift", "drift", "sparsity",
           "sparse-activations", "relufication", "accumulation-stop")


def _with_preset() -> list[str]:
    return sorted(n for n, c in list_experiments().items() if c.paper is not None
                  and c.__module__.startswith("actlab.experiments"))


def _shards(folder: Path, *, headed: bool, n: int = 6000, top: int = 50_257) -> Path:
    """Token shards of random GPT-2 ids: headed FineWeb-style files, or nanoGPT's raw
    ``train.bin`` / ``val.bin``."""
    from actlab.data.shards import write_shards

    rng = np.random.default_rng(0)
    splits = {"train": rng.integers(0, top, n).astype(np.uint16),
              "val": rng.integers(0, top, n // 2).astype(np.uint16)}
    write_shards(folder, splits, prefix="fineweb", header=headed)
    return folder


def _latents(folder: Path, *, n: int, size: int = 32, suffix: str = ".safetensors") -> Path:
    """One latent shard of ``n`` examples ``(4, size, size)`` whose labels reach 999
    (ImageNet's 1000 classes)."""
    from actlab.data.latents import write_latent_shard

    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(n) % 1000
    labels[-1] = 999
    write_latent_shard(folder / f"shard0{suffix}", torch.randn(n, 4, size, size, generator=g),
                       labels)
    return folder


def _paper_config(name: str, overrides: dict):
    exp = get_experiment(name)
    over = paper_overrides(exp, overrides)
    return exp, build_config(exp.Config, {**scale_overrides(exp, "paper"), **over})


def test_the_presets_are_the_ones_documented_and_list_marks_them():
    assert _with_preset() == sorted(PRESETS)
    result = toy.invoke("run", "--list")
    lines = {line.split()[0]: line.split()[1] for line in result.output.splitlines()[1:]}
    assert all(lines[name] == "yes" for name in PRESETS)
    assert lines["signal"] == "-" and lines["toy"] == "-"


@pytest.mark.parametrize("name", PRESETS)
def test_every_value_names_its_source_and_is_a_config_field(name):
    exp = get_experiment(name)
    preset = exp.paper
    fields = set(exp.Config.__dataclass_fields__)
    assert set(preset.settings) <= fields, set(preset.settings) - fields
    for field, setting in preset.settings.items():
        source = setting.source
        assert source.startswith(("Rethinking Activation Functions, ", "Bug or Feature², ",
                                  "code: ", "ours: ")), (field, source)
        assert len(source) > len("ours: ") + 5, (field, source)
    if preset.data is not None:
        assert preset.data.field in fields and preset.data.format and preset.data.source


def test_a_preset_built_on_another_shares_its_settings():
    from actlab.experiments.dit_paper import DIT_PERCENTILE, DIT_REFERENCE, DIT_SHIFT
    from actlab.experiments.teacher_student.paper import CONTROLLED_MODEL

    for name in ("teacher-student", "shift-sweep", "size-sweep", "ablations"):
        settings = get_experiment(name).paper.settings
        assert all(settings[k] is v for k, v in CONTROLLED_MODEL.settings.items()), name
    for preset in (DIT_SHIFT, DIT_PERCENTILE):
        assert preset.settings["batch_size"] is DIT_REFERENCE.settings["batch_size"]
    assert get_experiment("spikes").paper is get_experiment("lm-drift").paper
    base = PaperPreset({"a": Setting(1, "ours: x")})
    grown = base.extend({"b": Setting(2, "ours: y")}, seeds=Setting(5, "ours: z"))
    assert grown.overrides() == {"a": 1, "b": 2} and base.overrides() == {"a": 1}
    with pytest.raises(ValueError, match="source"):
        Setting(1, " ")


@pytest.mark.parametrize("name, what", [("lm-shift", "OpenWebText"), ("spikes", "FineWeb"),
                                        ("dit-shift", "ImageNet-1K")])
def test_without_data_paper_says_in_one_line_which_data_in_which_format(name, what):
    result = toy.invoke("run", name, "--paper")
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith("error: data: ") and what in message
    assert "--set data=PATH" in message and ("shards" in message)


def test_paper_refusals_and_the_data_path(tmp_path):
    result = toy.invoke("run", "signal", "--paper")
    assert result.exit_code == 2 and "has no paper preset" in result.stderr
    assert "teacher-student" in result.stderr  # names the experiments that have one
    assert toy.invoke("run", "teacher-student", "--paper", "--quick").exit_code == 2
    # a bare folder gets the preset's prefix; a prefixed one is kept
    exp = get_experiment("dit-shift")
    assert paper_overrides(exp, {"data": "/x"}) == {"data": "latents:/x"}
    assert paper_overrides(exp, {"data": "latents:/x", "lr": "1"}) == {"data": "latents:/x",
                                                                       "lr": "1"}
    with pytest.raises(ConfigError, match="latent folder"):  # the config's own path check
        make_plan(exp, "paper", {"data": str(tmp_path / "missing")})
    # the documents' seed count where a preset states one (App. C.2's 100 paired seeds)
    assert len(make_plan(get_experiment("size-sweep"), "paper").seeds) == 100
    assert len(make_plan(get_experiment("size-sweep"), "paper", n_seeds=2).seeds) == 2


# ------------------------------------------------------------ the papers' size, on meta
def _walk(name: str, overrides: dict, units: slice = slice(1), seeds: tuple[int, ...] = (0,)):
    """Run the ``units`` of the paper preset on the meta device."""
    exp, config = _paper_config(name, overrides)
    mode = MetaReads()
    for unit in exp.units(config)[units]:
        with mode, on_device(META):
            result = exp.run_unit(config, dict(unit), list(seeds),
                                  UnitContext(workdir=Path("."), device=META))
        assert result.status == "ok", (unit, result.error)
        assert result.rows
    assert mode.heavy["meta"] > 0 and not mode.heavy_on_cpu, mode.heavy_on_cpu.most_common(3)
    assert not mode.generator_mismatches, mode.generator_mismatches[:3]
    return config


# Shortened protocols (steps, evaluations), the models at the papers' size. bfloat16 autocast
# has no meta device, so the GPT walks compute in float32 (the tiny CPU runs keep bfloat16).
TS_SHORT = {"steps": 3, "log_points": 2, "eval_size": 64}
LM_SHORT = {"steps": 1, "eval_every": 1, "eval_batches": 1, "dtype": "float32",
            "log_every": 1}
DIT_SHORT = {"steps": 2, "log_points": 2, "eval_points": 1, "loss_samples": 4}


@pytest.mark.slow
def test_the_rethinking_family_walks_at_the_papers_size(tmp_path):
    # curvature and landscapes are walked at quick scale (test_meta_units): their code does
    # not change with the model's size
    config = _walk("teacher-student", {**TS_SHORT, "curvature_seeds": 0,
                                       "landscape_points": 0})
    assert (config.d, config.m, config.L) == (50, 200, 20)
    _walk("shift-sweep", TS_SHORT)
    _walk("ablations", TS_SHORT)
    sizes = _walk("size-sweep", TS_SHORT, seeds=(0, 1))
    assert sizes.grid_L == [10, 20] and "50x200x20" in sizes.sizes


@pytest.mark.slow
def test_the_gpts_walk_at_the_papers_size(tmp_path):
    raw = _shards(tmp_path / "owt", headed=False)
    config = _walk("lm-shift", {**LM_SHORT, "data": str(raw), "probe_every": 1,
                                "probe_batches": 1})
    assert (config.n_layer, config.n_embd, config.block_size, config.batch_size) == \
        (12, 768, 1024, 480)
    fineweb = _shards(tmp_path / "fineweb", headed=True)
    short = {**LM_SHORT, "data": str(fineweb), "warmup": 1, "warmdown": 0}
    config = _walk("spikes", {**short, "probe_batches": 1})
    assert (config.model, config.block_size, config.vocab_size) == ("gpt-nano", 2048, 50_257)
    _walk("lm-drift", {**short, "probe_every": 1, "probe_batches": 1})


@pytest.mark.slow
def test_the_dits_walk_at_the_papers_size(tmp_path):
    folder = _latents(tmp_path / "latents", n=256)
    config = _walk("dit-shift", {**DIT_SHORT, "data": str(folder)})
    assert (config.model, config.batch_size) == ("DiT-B/2", 256)
    # Percentile LayerNorm frozen by Accumulation Stop: the condition with its own code
    config = _walk("dit-percentile", {**DIT_SHORT, "data": str(folder)}, units=slice(2, 3))
    assert (config.model, config.bias) == ("DiT-S/2", False)


# --------------------------------------------- a few steps on tiny data, the same code path
TINY_GPT = {"model": "custom", "vocab_size": 50_257, "n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16,
            "batch_size": 4, "steps": 3, "eval_every": 1, "eval_batches": 1, "warmup": 1,
            "compile_model": "off"}


def _units(name: str, overrides: dict, tmp_path: Path, units: int = 1) -> None:
    exp, config = _paper_config(name, overrides)
    for unit in exp.units(config)[:units]:
        result = exp.run_unit(config, dict(unit), [0], UnitContext(workdir=tmp_path))
        assert result.status == "ok", (unit, result.error)
        losses = [row[5] for row in result.rows if row[4] == "val_loss"]
        assert losses and all(np.isfinite(losses)), unit


def test_the_gpt_presets_train_on_headed_shards(tmp_path):
    fineweb = _shards(tmp_path / "fineweb", headed=True, n=3000)
    tiny = {**TINY_GPT, "data": str(fineweb), "warmdown": 1}
    _units("spikes", {**tiny, "probe_batches": 1}, tmp_path)
    _units("lm-drift", {**tiny, "probe_every": 1, "probe_batches": 1}, tmp_path)


def test_the_dit_presets_train_on_latent_shards(tmp_path):
    tiny = {"model": "custom", "hidden_size": 16, "depth": 1, "num_heads": 2, "steps": 2,
            "batch_size": 4, "log_points": 2, "eval_points": 1, "loss_samples": 4}
    npy = _latents(tmp_path / "npy", n=8, size=8, suffix=".npy")
    exp, config = _paper_config("dit-shift", {**tiny, "data": str(npy)})
    result = exp.run_unit(config, exp.units(config)[1], [0], UnitContext(workdir=tmp_path))
    assert result.status == "ok", result.error
    assert {"train_loss", "hidden_mean", "batch_loss"} <= {row[4] for row in result.rows}
    safetensors = _latents(tmp_path / "st", n=8, size=8)
    exp, config = _paper_config("dit-percentile", {**tiny, "data": str(safetensors)})
    assert config.bias is False and config.norm_spec("percentile-frozen").endswith(
        f"freeze_after={config.warmup}")
    result = exp.run_unit(config, {"condition": "percentile-frozen"}, [0],
                          UnitContext(workdir=tmp_path))
    assert result.status == "ok", result.error


@pytest.mark.xdist_group("processes")
def test_run_paper_end_to_end_records_every_source(tmp_path):
    raw = _shards(tmp_path / "owt", headed=False, n=3000)
    sets = [f"{k}={v}" for k, v in {**TINY_GPT, "probe_every": 1, "probe_batches": 1}.items()]
    args = ["run", "lm-shift", "--paper", "--set", f"data={raw}", "--seeds", "1",
            "--out", tmp_path / "runs", "--name", "tiny"]
    for item in sets:
        args += ["--set", item]
    result = toy.invoke(*args)
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "runs" / "lm-shift" / "tiny" / "config.json").read_text())
    assert record["scale"] == "paper" and record["config"]["data"] == f"shards:{raw}"
    paper = record["paper"]
    assert paper["settings"]["steps"]["value"] == 300_000  # the preset's, before --set
    assert paper["settings"]["steps"]["source"].startswith("Rethinking Activation Functions, "
                                                           "§4.3")
    assert paper["settings"]["lr"]["source"].startswith("code: karpathy/nanoGPT train.py")
    assert "probe_every" in paper["ours"] and paper["data"]["what"] == "OpenWebText"
    assert record["config"]["dtype"] == "bfloat16" and record["config"]["lr"] == 6e-4
    assert record["config"]["activations"] == ["gelu"] and record["config"]["steps"] == 3
