"""``--paper`` for the vision experiments: ViT-Base on an ImageNet folder (``vit-shift``),
MaxViT-T on one (``accumulation-stop``), "Bug or Feature²"'s CIFAR-10 models (``drift``,
``sparsity``, ``sparse-activations``, ``relufication``). Each refuses in one line without its
data, is walked on the meta device at the papers' size, trains a few steps on tiny data in the
exact on-disk formats (CIFAR-10's python batches, a folder of PNGs with train/ and val/), and
is priced by ``actlab plan`` with the steps its epochs give; each model's paper training
comes from its appendix."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_data_files import _write_fake_cifar
from test_fid_latents import _image_folder
from test_paper_presets import _paper_config, _walk

from actlab.errors import ConfigError
from actlab.runner.experiment import get_experiment
from actlab.runner.plan import make_plan

import _toy_experiments as toy

CIFAR_PRESETS = ("drift", "sparsity", "sparse-activations", "relufication")


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """CIFAR-10's python batches, 8 images each (40 training, 8 test)."""
    folder = tmp_path_factory.mktemp("cifar") / "cifar-10-batches-py"
    _write_fake_cifar(folder, 8, np.random.default_rng(0))
    return folder


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A folder with train/ (2 classes x 6 PNGs) and val/ (2 x 2), 20 x 20 pixels."""
    root = tmp_path_factory.mktemp("imagenet")
    _image_folder(root / "train", 6, size=20)
    _image_folder(root / "val", 2, size=20)
    return root


@pytest.mark.parametrize("name, what, fragment", [
    ("vit-shift", "ImageNet-1K", "DIR/train/<class>/<image>"),
    ("accumulation-stop", "ImageNet-1K", "DIR/val/<class>/<image>"),
    *((name, "CIFAR-10", "data_batch_1 .. data_batch_5") for name in CIFAR_PRESETS)])
def test_without_data_paper_says_in_one_line_which_data_in_which_format(name, what, fragment):
    result = toy.invoke("run", name, "--paper")
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith("error: data: ") and what in message and fragment in message


def test_each_models_training_is_its_appendixs(cifar):
    from actlab.experiments.classifier_paper import classifier_settings

    exp, config = _paper_config("sparse-activations", {"data": str(cifar)})
    assert config.cifar_dir == str(cifar) and config.batch_size == 128
    mlp = classifier_settings(config, "mlp", 50_000)  # App. D.2: Adam 1e-3, wd 1e-4, 5 epochs
    assert (mlp.optimizer, mlp.lr, mlp.weight_decay, mlp.steps) == ("adam", 1e-3, 1e-4, 5 * 390)
    resnet = classifier_settings(config, "resnet", 50_000)  # App. D.3
    assert (resnet.optimizer, resnet.momentum, resnet.weight_decay, resnet.schedule) == \
        ("nesterov", 0.9, 5e-4, "cosine")
    assert (resnet.lr, resnet.warmup_from, resnet.warmup) == (1e-3, 0.1, 5 * 390)
    topk = classifier_settings(config, "resnet", 50_000, topk=True)
    assert (topk.lr, topk.steps, topk.warmup_from) == (5e-2, 50 * 390, 0.0)
    exp, drift = _paper_config("drift", {"data": str(cifar)})
    assert (drift.hidden, drift.real_hidden, drift.epochs, drift.digits_weight_decay) == \
        (128, 1024, 5, 1e-4)
    assert drift.unit_steps(50_000) == 5 * 390 and drift.unit_steps(12_800) == 5 * 100
    with pytest.raises(ConfigError, match="no CIFAR-10 training for vit"):
        _paper_config("sparsity", {"data": str(cifar), "models": "mlp,vit"})


def test_paper_vit_shift_is_dyts_vit_base_recipe(images):
    from actlab.experiments.imagenet_paper import ACCUMULATION_STOP, MAXVIT_TRAINING

    exp, config = _paper_config("vit-shift", {"data": str(images)})
    assert config.data == f"folder:{images}"
    assert (config.dim, config.depth, config.heads, config.patch_size, config.image_size) == \
        (768, 12, 12, 16, 224)
    assert (config.epochs, config.batch_size, config.lr, config.warmup_epochs) == \
        (300, 4096, 4e-3, 20)
    # ImageNet-1K's 1,281,167 training images in batches of 4096: 312 steps an epoch
    assert config.total_steps(1_281_167) == 300 * 312
    settings = config.settings(300 * 312, 1_281_167)
    assert settings.warmup == 20 * 312 and settings.min_lr_ratio * 4e-3 == pytest.approx(1e-6)
    assert ACCUMULATION_STOP.settings["image_size"].value == 224
    assert MAXVIT_TRAINING["schedule"].value == "onecycle"
    with pytest.raises(ConfigError, match="train"):
        _paper_config("vit-shift", {"data": str(images / "train")})


# ------------------------------------------------------------------ the papers' size, on meta
@pytest.mark.slow
def test_the_cifar_presets_walk_at_the_papers_size(cifar):
    config = _walk("drift", {"data": str(cifar), "n_random": 256, "record_every": 5,
                             "activations": "relu"}, units=slice(None), seeds=(0,))
    assert (config.real_hidden, config.epochs) == (1024, 5)
    short = {"data": str(cifar), "max_steps": 2}
    _walk("sparsity", {**short, "models": "resnet", "topk_levels": "0.1",
                       "percentile_levels": "0.5,0.9"}, units=slice(1, 3))
    config = _walk("sparse-activations", {**short, "activations": "relu",
                                          "setups": "mlp:rmsnorm,resnet:batchnorm"},
                   units=slice(None))
    assert config.size == "paper"
    _walk("relufication", short, units=slice(None))


@pytest.mark.slow
def test_the_imagenet_presets_walk_at_the_papers_size(images):
    # ViT-B/16 at 224 x 224 through the whole protocol, at DyT's per-GPU batch of 64
    config = _walk("vit-shift", {"data": str(images), "batch_size": 64, "epochs": 0,
                                 "steps": 1, "log_points": 2, "train_eval_images": 4,
                                 "probe_images": 4, "workers": 2})
    assert (config.dim, config.depth, config.bias, config.drop_path) == (768, 12, True, 0.1)
    # MaxViT-T at 224 x 224, Percentile Centering frozen by Accumulation Stop, in bfloat16
    # (bfloat16 autocast has no meta device: the walk computes in float32)
    config = _walk("accumulation-stop", {"data": str(images), "max_steps": 3, "warmup": 1,
                                         "workers": 2, "dtype": "float32"}, units=slice(3, 4))
    assert (config.size, config.models, config.q) == ("paper", ["maxvit"], 0.5)


# ------------------------------------------------ a few steps on tiny data, the same code path
@pytest.mark.parametrize("name, overrides", [
    ("drift", {"n_random": 128, "real_hidden": 32, "record_every": 5}),
    ("sparsity", {"size": "cpu", "max_steps": 3, "percentile_levels": "0.5,0.9",
                  "topk_levels": "0.1"}),
    ("sparse-activations", {"size": "cpu", "max_steps": 3, "activations": "relu,sugar"}),
    ("relufication", {"size": "cpu", "max_steps": 3})])
def test_the_cifar_presets_train_on_python_batches(name, overrides, cifar, tmp_path):
    from actlab.runner.experiment import UnitContext

    exp, config = _paper_config(name, {"data": str(cifar), **overrides})
    units = exp.units(config)
    for unit in (units[0], units[-1]):  # the first and last models / data
        result = exp.run_unit(config, dict(unit), [0], UnitContext(workdir=tmp_path))
        assert result.status == "ok", (unit, result.error)
        values = [row[5] for row in result.rows]
        assert values and np.all(np.isfinite(values)), unit


def test_the_imagenet_presets_train_on_a_png_folder(images, tmp_path):
    from actlab.runner.experiment import UnitContext

    tiny = {"data": str(images), "image_size": 16, "patch_size": 8, "dim": 16, "depth": 1,
            "heads": 2, "batch_size": 4, "epochs": 1, "log_points": 2, "workers": 2,
            "train_eval_images": 4, "probe_images": 4}
    exp, config = _paper_config("vit-shift", tiny)
    result = exp.run_unit(config, exp.units(config)[1], [0], UnitContext(workdir=tmp_path))
    assert result.status == "ok", result.error
    metrics = {row[4] for row in result.rows}
    assert {"train_loss", "test_accuracy", "hidden_mean", "act_mean", "batch_loss"} <= metrics
    steps = {row[2] for row in result.rows if row[4] == "test_loss"}
    assert min(steps) == 0 and max(steps) == 3  # one epoch: 12 images // 4 a batch
    exp, config = _paper_config("accumulation-stop", {
        "data": str(images), "size": "cpu", "image_size": 16, "batch_size": 4, "max_steps": 4,
        "warmup": 2, "workers": 2})
    assert config.image_dir == str(images) and config.randaugment == "rand-n2-m9"
    result = exp.run_unit(config, exp.units(config)[-1], [0], UnitContext(workdir=tmp_path))
    assert result.status == "ok", result.error
    rows = {row[4]: row[5] for row in result.rows}
    assert rows["stat_computations"] == 2 and 0 <= rows["accuracy"] <= 1  # frozen after 2


# ------------------------------------------------------------------ actlab plan --paper
def test_plan_paper_prices_the_papers_models(cifar, images):
    def plan(name: str, data, *sets: str) -> dict:
        more = [word for item in sets for word in ("--set", item)]
        result = toy.invoke("plan", name, "--paper", "--set", f"data={data}", "--seeds", "1",
                            "--json", *more)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    drift = {row["label"].split()[1]: row for row in plan("drift", cifar)["units"]}
    assert drift["3072-1024x5"]["steps"] == 5 * 390  # CIFAR-10: 50,000 // 128 an epoch
    assert drift["3072-1024x5"]["params"] == 3072 * 1024 + 5 * 1024 ** 2 + 1024 * 10
    assert drift["128-128x5"]["steps"] == 5 * 100
    rows = plan("relufication", cifar)["units"]
    resnet = next(r for r in rows if r["label"].startswith("resnet"))
    assert resnet["steps"] == 50 * 390 + 391  # 50 epochs, then one epoch of fine-tuning
    assert resnet["params"] == 11_173_952  # ResNet-18 without a head bias (test_paper_sizes)
    units = plan("sparsity", cifar, "percentile_levels=0.5,0.9")["units"]
    # three models, 2 percentile and App. D.3's 5 Top-K levels; the ResNet also App. B.2's three
    # per-channel levels
    assert len(units) == 3 * (2 + 5) + 3
    assert sum("topk-channel" in u["unit"] for u in units) == 3
    assert {u["steps"] for u in units if u["label"].startswith("resnet")} == {50 * 390}
    assert plan("sparse-activations", cifar)["total"]["gpu_hours"] > 0
    vit = plan("vit-shift", images)["units"][0]
    assert vit["params"] == 86_567_656 - 1000 * 769 + 2 * 769  # ViT-B/16, 2 classes here
    assert vit["steps"] == 300 * 1 and vit["batch"] == 4096  # 12 images: one step an epoch
    # 12 images: 60 epochs are 60 steps, shorter than the 50,000 of warm-up: refused
    refused = toy.invoke("plan", "accumulation-stop", "--paper", "--set", f"data={images}")
    assert refused.exit_code == 2 and "warmup" in refused.stderr
    maxvit = plan("accumulation-stop", images, "warmup=10",
                  "norms=layernorm,percentile-frozen")["units"][0]
    assert maxvit["params"] == 30_919_624 - 1000 * 512 + 2 * 512 and maxvit["batch"] == 128
    assert maxvit["steps"] == 60


def test_the_preset_kinds_have_no_paper_training_outside_the_documents(images):
    exp = get_experiment("accumulation-stop")
    with pytest.raises(ConfigError, match="maxvit alone"):
        make_plan(exp, "paper", {"data": str(images), "models": "mlp"})


# ------------------------------------------------------------------ --nproc on the folder
@pytest.mark.slow
@pytest.mark.xdist_group("processes")  # 2 gloo ranks (tests/conftest.py)
def test_a_folder_unit_on_two_ranks_equals_one_process(images, tmp_path):
    # each rank reads only its half of every global batch (Trainer(sharded=True)): its
    # images, augmentations and Mixup / CutMix are one process's, so the rows are too
    import torch.distributed as dist
    from test_nproc import HELPER, _assert_same_rows, _rows, _torchrun

    from actlab.runner.config import build_config, config_to_dict
    from actlab.runner.execute import UnitTask, execute_unit

    if not dist.is_available():
        pytest.skip("needs torch.distributed with gloo")
    exp = get_experiment("vit-shift")
    config = build_config(exp.Config, {
        **exp.quick, "data": f"folder:{images}", "image_size": 16, "patch_size": 8, "dim": 16,
        "depth": 1, "heads": 2, "batch_size": 4, "steps": 3, "log_points": 2, "workers": 1,
        "train_eval_images": 6, "probe_images": 4, "dtype": "float64"})

    def task(workdir):
        return UnitTask(experiment="vit-shift", module=type(exp).__module__, module_root=None,
                        config=config_to_dict(config), point={}, unit=exp.units(config)[1],
                        seeds=[0], unit_id="folder-u", workdir=str(workdir), threads=1)

    (tmp_path / "tasks.json").write_text(json.dumps([task(tmp_path / "ranks").__dict__]))
    proc = _torchrun(HELPER, tmp_path / "tasks.json", tmp_path / "records.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = json.loads((tmp_path / "records.json").read_text())[0]
    assert ranks["world_size"] == 2
    one = execute_unit(task(tmp_path / "one"))
    _assert_same_rows(one, ranks)
    assert {"hidden_mean", "train_loss", "test_accuracy"} <= {k[4] for k in _rows(one)}
