"""``actlab trajectory`` and :func:`actlab.trajectory.checkpoint_trajectory`: hidden-state means
per block over training checkpoints ("Rethinking Activation Functions", App. E.2).

Tiny GPT-NeoX (Pythia's family) and OLMo-2 models are built from their configs (no download),
trained for a few steps and saved at several of them. The per-block means are checked against
a dense reference: the model's own ``output_hidden_states`` (with the last entry taken before
the final norm, ``config.tie_last_hidden_states = False``), averaged with ``Tensor.mean``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from click.testing import CliRunner  # noqa: E402

from actlab.analysis import trajectory_overshoot  # noqa: E402
from actlab.cli import main  # noqa: E402
from actlab.trajectory import checkpoint_step, checkpoint_trajectory, order_checkpoints  # noqa: E402

VOCAB, LAYERS = 64, 3
WORDS = "the quick brown fox jumps over a lazy dog while seven wise owls watch".split()
TEXT = " ".join(WORDS[(7 * i) % len(WORDS)] for i in range(200))


def _config(family: str):
    T = transformers
    shared = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=LAYERS,
                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                  bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if family == "gpt_neox":
        return T.GPTNeoXConfig(**shared)
    return T.Olmo2Config(num_key_value_heads=2, **shared)


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(WORDS))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def _train_and_save(root, family: str, saves: dict[int, str], tokenizer=None) -> list[str]:
    """Train a tiny model with AdamW; ``save_pretrained`` at each step of ``saves`` (step ->
    folder name). Returns the folders in step order."""
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(family))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, VOCAB, (4, 16), generator=torch.Generator().manual_seed(1))
    folders = []
    for step in range(max(saves) + 1):
        if step in saves:
            folder = root / saves[step]
            model.save_pretrained(folder)
            if tokenizer is not None:
                tokenizer.save_pretrained(folder)
            folders.append(str(folder))
        if step < max(saves):
            model(ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
    return folders


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trajectory")
    neox = _train_and_save(root / "pythia-tiny", "gpt_neox", {0: "step0", 3: "step3", 6: "step6"})
    olmo = _train_and_save(root / "olmo-tiny", "olmo2",
                           {2: "checkpoint-2", 5: "checkpoint-5", 10: "checkpoint-10"},
                           tokenizer=_tokenizer())
    text = root / "inputs.txt"
    text.write_text(TEXT)
    return {"gpt_neox": neox, "olmo2": olmo, "text": str(text), "root": root}


def dense_means(folder: str, ids: torch.Tensor) -> np.ndarray:
    """Reference: per block, the mean over sequences of each sequence's mean over tokens and
    features of ``output_hidden_states`` (entries 1..L, the last one before the final norm)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    with torch.no_grad():
        tied = model(ids, output_hidden_states=True, use_cache=False).hidden_states
        model.config.tie_last_hidden_states = False
        hidden = model(ids, output_hidden_states=True, use_cache=False).hidden_states
    assert len(hidden) == LAYERS + 1
    assert not torch.allclose(tied[-1], hidden[-1])  # the flag did untie the final norm
    return np.array([h.double().mean(dim=(1, 2)).mean().item() for h in hidden[1:]])


def test_cli_means_match_output_hidden_states_in_step_order(runs, tmp_path) -> None:
    folders = runs["gpt_neox"]
    out = tmp_path / "out"
    given = [folders[2], folders[0], folders[1]]  # not in step order
    result = CliRunner().invoke(main, ["trajectory", *given, "--sequences", "5", "--tokens", "12",
                                       "--batch-size", "3", "--seed", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "gpt_neox: 3 checkpoints" in result.stdout
    summary = json.loads((out / "trajectory.json").read_text())
    assert summary["steps"] == [0, 3, 6]
    assert [c["path"] for c in summary["checkpoints"]] == folders
    # no tokenizer in the folders: ids from torch.randint seeded with --seed (documented)
    ids = torch.randint(0, VOCAB, (5, 12), generator=torch.Generator().manual_seed(4))
    reference = np.stack([dense_means(f, ids) for f in folders])  # steps x blocks
    measured = np.array([summary["hidden_mean"][f"block{i}"] for i in range(LAYERS)]).T
    np.testing.assert_allclose(measured, reference, rtol=1e-5, atol=1e-7)
    assert np.abs(np.diff(reference, axis=0)).max() > 1e-3  # training moved the means
    for i in range(LAYERS):
        over, step = trajectory_overshoot(reference[:, i], [0, 3, 6])
        assert summary["overshoot"][f"block{i}"] == pytest.approx(over, abs=1e-6)
        assert summary["overshoot_step"][f"block{i}"] == (None if np.isnan(step) else step)
    assert summary["inputs"] == {**summary["inputs"], "source": "random", "sequences": 5,
                                 "tokens": 12, "seed": 4}
    table = (out / "trajectory.csv").read_text().splitlines()
    assert table[0] == "run,seed,step,layer,metric,value" and len(table) == 1 + 3 * LAYERS
    assert table[1].startswith("pythia-tiny,0,0,block0,hidden_mean,")
    assert (out / "trajectory.png").read_bytes()[:4] == b"\x89PNG"


def test_olmo2_text_tokenised_by_the_checkpoint_tokenizer(runs) -> None:
    folders = runs["olmo2"]  # checkpoint-2, -5, -10: sorted by number, not by name
    result = checkpoint_trajectory(folders[::-1], text=runs["text"], sequences=3, tokens=8,
                                   batch_size=2)
    assert result.steps == [2, 5, 10] and result.paths == folders
    tokenizer = transformers.AutoTokenizer.from_pretrained(folders[0], local_files_only=True)
    ids = torch.tensor(tokenizer(TEXT, add_special_tokens=False)["input_ids"][:24]).view(3, 8)
    assert torch.equal(result.input_ids, ids) and int(ids.max()) > 0
    reference = np.stack([dense_means(f, ids) for f in folders])
    np.testing.assert_allclose(result.hidden_mean, reference, rtol=1e-5, atol=1e-7)
    assert result.inputs["source"] == "text" and result.model_type == "olmo2"
    assert result.modules == [f"model.layers.{i}" for i in range(LAYERS)]


def test_default_inputs_are_the_stdlib_through_the_tokenizer_and_progress_shows(runs, capsys):
    result = checkpoint_trajectory(runs["olmo2"], sequences=2, tokens=6, progress=True)
    assert result.inputs["source"] == "stdlib" and tuple(result.input_ids.shape) == (2, 6)
    assert "3/3" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "step"), [
    ("step1000", 1000), ("checkpoint-250", 250), ("stage1-step10000-tokens21B", 10000),
    ("iter_0001000", 1000), ("ckpt_358", 358), ("main", None),
])
def test_step_from_folder_name(tmp_path, name, step) -> None:
    assert checkpoint_step(tmp_path / name) == step


def test_step_from_trainer_state_and_explicit_steps(tmp_path) -> None:
    final, other = tmp_path / "final", tmp_path / "step5"
    final.mkdir()
    other.mkdir()
    (final / "trainer_state.json").write_text(json.dumps({"global_step": 7}))
    assert order_checkpoints([final, other]) == [(5, other), (7, final)]
    assert order_checkpoints([final, other], steps=[9, 1]) == [(1, other), (9, final)]


def test_cli_errors_are_one_line(runs, tmp_path) -> None:
    neox, olmo = runs["gpt_neox"], runs["olmo2"]
    vit = tmp_path / "step1"
    transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32).save_pretrained(vit)
    (tmp_path / "empty").mkdir()
    named = tmp_path / "main"
    _config("gpt_neox").save_pretrained(named)
    cases = {
        "no such checkpoint folder": [str(tmp_path / "missing")],
        "has no config.json": [str(tmp_path / "empty"), "--steps", "1"],
        "is not a causal LM": [str(vit)],
        "No such option": [*neox, "--bogus"],
        "no step in the folder name 'main'": [str(named)],
        "2 steps for 3 checkpoint folders": [*neox, "--steps", "1,2"],
        "whole numbers": [*neox, "--steps", "a,b,c"],
        "both at step 3": [neox[1], neox[1], neox[2]],
        "not of one model": [neox[0], olmo[0]],
        "a text needs a tokenizer": [*neox, "--text", runs["text"], "--tokens", "8"],
        "more than the model's 64 positions": [*neox, "--tokens", "65"],
        "--sequences: must be at least 1": [*neox, "--sequences", "0"],
    }
    runner = CliRunner()
    for expected, args in cases.items():
        result = runner.invoke(main, ["trajectory", *args, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
        assert expected in lines[0], lines[0]
        assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_help_explains_order_inputs_and_statistic() -> None:
    result = CliRunner().invoke(main, ["trajectory", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for phrase in ("sorted by step", "checkpoint-1000", "trainer_state.json", "--steps",
                   "standard library", "torch.randint", "before the model's final norm",
                   "trajectory_overshoot", "trajectory.json"):
        assert phrase in text, phrase
