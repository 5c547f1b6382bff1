"""The teacher-student recipe on its own, against plain PyTorch references.

The ensemble-trained students are checked against an independent loop (one model,
``torch.optim.Adam``, ``F.mse_loss``) fed the same per-seed streams; the teacher's targets
against a direct forward; the gradient angle and the landscape's centre against gradients
and losses computed here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from actlab.activations.spec import theory_shift
from actlab.data.synthetic import seed_generator
from actlab.errors import ConfigError
from actlab.nn.residual_mlp import ResidualMLP
from actlab.recipes.teacher_student import (
    ModelSettings,
    build_models,
    check_shift_offsets,
    landscape,
    shift_conditions,
    start_point,
    targets_from_teacher,
    train_students,
)
from actlab.runner.fields import check_plain_activations
from actlab.train.ensemble import Ensemble

pytestmark = pytest.mark.usefixtures("one_thread")

PAIR = {"unshifted": "relu:shift=0", "shifted": "relu:shift=theory"}
SMALL = dict(d=4, m=8, L=2, steps=12, batch_size=16, eval_size=32, log_points=5,
             dtype="float64")


def _plain_loop(settings: ModelSettings, seed: int, conditions: dict[str, str],
                log_at: list[int]) -> dict[str, dict[str, list]]:
    """Each condition's student of one seed, trained alone with torch.optim.Adam.

    Returns per condition the eval loss at ``log_at``, the loss of every update's batch
    and the flat gradient of every update.
    """
    dtype = torch.float64
    kwargs = dict(norm=settings.norm, bias=settings.bias)
    d, m, L = settings.d, settings.m, settings.L
    teacher = ResidualMLP(d, m, L, "relu", generator=seed_generator(seed, "teacher"),
                          **kwargs).to(dtype)
    base = ResidualMLP(d, m, L, "relu", generator=seed_generator(seed, "student"),
                       **kwargs).to(dtype)
    x_eval = torch.randn(settings.eval_size, d, generator=seed_generator(seed, "eval"),
                         dtype=dtype)
    with torch.no_grad():
        y_eval = teacher(x_eval)
    out = {}
    for name, spec in conditions.items():
        student = base.with_activation(spec)
        opt = torch.optim.Adam(student.parameters(), lr=settings.lr)
        stream = seed_generator(seed, "train")
        record: dict[str, list] = {"eval": [], "train": [], "grads": []}

        def evaluate(student=student, record=record) -> None:
            with torch.no_grad():
                record["eval"].append(F.mse_loss(student(x_eval), y_eval).item())

        if 0 in log_at:
            evaluate()
        for step in range(1, settings.steps + 1):
            x = torch.randn(settings.batch_size, d, generator=stream, dtype=dtype)
            with torch.no_grad():
                y = teacher(x)
            opt.zero_grad()
            loss = F.mse_loss(student(x), y)
            loss.backward()
            record["train"].append(loss.item())
            record["grads"].append(torch.cat([p.grad.flatten() for p in student.parameters()]))
            opt.step()
            if step in log_at:
                evaluate()
        out[name] = record
    return out


def test_ensemble_students_equal_a_plain_loop_per_member():
    settings = ModelSettings(**SMALL)
    run = train_students(settings, "relu", PAIR, [0, 2], angle_steps=[1, 7])
    assert run.steps[0] == 0 and run.steps[-1] == settings.steps
    for si, seed in enumerate(run.seeds):
        plain = _plain_loop(settings, seed, PAIR, run.steps)
        for c in PAIR:
            np.testing.assert_allclose(run.eval_loss[c][si], plain[c]["eval"], rtol=1e-9)
            np.testing.assert_allclose(run.train_loss[c][si], plain[c]["train"], rtol=1e-9)
        # the angle between the two students' own gradients at update k
        for k in (1, 7):
            g_u, g_s = plain["unshifted"]["grads"][k - 1], plain["shifted"]["grads"][k - 1]
            cos = torch.dot(g_u, g_s) / (g_u.norm() * g_s.norm())
            assert run.grad_angles[k][si] == pytest.approx(math.degrees(math.acos(cos)),
                                                           rel=1e-9)
    assert not run.any_diverged


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters())


def test_block_statistics_are_the_students_own_at_the_last_step():
    settings = ModelSettings(**SMALL)
    run = train_students(settings, "relu", PAIR, [1], checkpoint_seed_index=0)
    _, students = build_models(settings, "relu", PAIR, [1])
    x_eval = torch.randn(settings.eval_size, settings.d, generator=seed_generator(1, "eval"),
                         dtype=torch.float64)
    for c in PAIR:
        student = students[c][0]
        torch.testing.assert_close(run.checkpoints[c][0], _flat(student))  # step 0: the init
        torch.testing.assert_close(run.checkpoints[c][-1], run.members.flat_params(c)[0])
        torch.nn.utils.vector_to_parameters(run.checkpoints[c][-1], student.parameters())
        with torch.no_grad():
            _, stats = student(x_eval, return_stats=True)
        np.testing.assert_allclose(run.hidden_mean[c][0, -1], stats["hidden_mean"].numpy(),
                                   rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(run.post_act_mean[c][0, -1], stats["post_act_mean"].numpy(),
                                   rtol=1e-9, atol=1e-12)


def test_block_update_is_each_blocks_distance_from_its_start():
    settings = ModelSettings(**SMALL)
    run = train_students(settings, "relu", PAIR, [1, 3])
    _, students = build_models(settings, "relu", PAIR, [1, 3])
    for c in PAIR:
        for si in range(2):
            start = dict(students[c][si].named_parameters())
            trained = dict(run.members.member(c, si).named_parameters())
            assert np.all(run.block_update[c][si, 0] == 0.0)  # step 0: nothing moved yet
            for block in range(settings.L):
                names = [n for n in start if n.startswith(f"blocks.{block}.")]
                moved = sum(((trained[n] - start[n]) ** 2).sum() for n in names).sqrt()
                size = sum((start[n] ** 2).sum() for n in names).sqrt()
                assert run.block_update[c][si, -1, block] == pytest.approx(
                    (moved / size).item(), rel=1e-9)
                assert run.block_update[c][si, -1, block] > 0


def test_member_copy_of_the_shifted_student_runs_shifted():
    settings = ModelSettings(**SMALL)
    run = train_students(settings, "relu", PAIR, [0], checkpoint_seed_index=0)
    _, students = build_models(settings, "relu", PAIR, [0])
    x = torch.randn(8, settings.d, dtype=torch.float64)
    torch.nn.utils.vector_to_parameters(run.checkpoints["shifted"][-1],
                                        students["shifted"][0].parameters())
    with torch.no_grad():
        torch.testing.assert_close(run.members.member("shifted", 0)(x), students["shifted"][0](x))


def test_students_of_a_seed_share_parameters_and_differ_in_activation_only():
    settings = ModelSettings(**SMALL)
    teachers, students = build_models(settings, "relu", PAIR, [0, 1])
    for si in range(2):
        u, s = students["unshifted"][si], students["shifted"][si]
        for pu, ps in zip(u.parameters(), s.parameters()):
            assert torch.equal(pu, ps)
        assert u.activation_spec == "relu:shift=0" and s.activation_spec == "relu:shift=theory"
        assert not torch.equal(_flat(teachers[si]), _flat(u))  # the teacher: its own stream
        assert _flat(teachers[si]).dtype == torch.float64
    assert not torch.equal(_flat(students["unshifted"][0]), _flat(students["unshifted"][1]))


@pytest.mark.parametrize("loss", ["mse", "soft_ce"])
def test_targets_from_teacher_equal_a_direct_forward(loss):
    torch.manual_seed(0)
    teachers = [ResidualMLP(5, 7, 2, "gelu", generator=seed_generator(s, "teacher"))
                for s in (0, 3)]
    x = torch.randn(2, 9, 5)
    y = targets_from_teacher(Ensemble({"teacher": teachers}), x, loss)
    with torch.no_grad():
        direct = torch.stack([t(x[i]) for i, t in enumerate(teachers)])
    if loss == "soft_ce":
        direct = torch.softmax(direct, dim=-1)
        torch.testing.assert_close(y.sum(-1), torch.ones(2, 9))
    torch.testing.assert_close(y, direct, rtol=1e-6, atol=1e-7)


def test_soft_ce_eval_loss_is_the_kl_divergence_to_the_teacher():
    settings = ModelSettings(**{**SMALL, "loss": "soft_ce", "steps": 3})
    run = train_students(settings, "relu", PAIR, [0])
    teachers, students = build_models(settings, "relu", PAIR, [0])
    x_eval = torch.randn(settings.eval_size, settings.d, generator=seed_generator(0, "eval"),
                         dtype=torch.float64)
    with torch.no_grad():
        p = torch.softmax(teachers[0](x_eval), -1)
        for c in PAIR:  # step 0: the initial students
            log_q = torch.log_softmax(students[c][0](x_eval), -1)
            kl = (p * (torch.log(p) - log_q)).sum(-1).mean()
            assert run.eval_loss[c][0, 0] == pytest.approx(kl.item(), rel=1e-9)


def test_landscape_centre_is_the_initial_loss_and_the_plane_is_the_gradients():
    settings = ModelSettings(**SMALL)
    start: dict = {}

    def on_start(_teacher, members, x_eval, y_eval):
        start["point"] = start_point(members, x_eval, y_eval, settings.loss, size=20)

    run = train_students(settings, "relu", PAIR, [0], checkpoint_seed_index=0,
                         on_start=on_start)
    point = start["point"]
    _, students = build_models(settings, "relu", PAIR, [0])
    x, y = point.batch
    assert x.shape == (20, settings.d)
    grads = {}
    for c in PAIR:
        model = students[c][0]
        loss = F.mse_loss(model(x), y)
        grads[c] = torch.cat([g.flatten() for g in torch.autograd.grad(loss, model.parameters())])
        torch.testing.assert_close(point.grads[c], grads[c], rtol=1e-9, atol=1e-12)
    planes = landscape(run, point, settings.loss, points=5)
    cos = torch.dot(grads["unshifted"], grads["shifted"]) / (
        grads["unshifted"].norm() * grads["shifted"].norm())
    assert planes["cos_initial_gradients"] == pytest.approx(cos.item(), rel=1e-9)
    for c in PAIR:
        plane = planes[c]
        assert np.asarray(plane["loss"]).shape == (5, 5)
        # both trajectories start at the common initialisation, the plane's origin
        for traj in plane["trajectories"].values():
            np.testing.assert_allclose(traj[0], [0.0, 0.0], atol=1e-12)
    with torch.no_grad():
        centre = F.mse_loss(students["unshifted"][0](x), y).item()
    assert planes["unshifted"]["loss"][2][2] == pytest.approx(centre, rel=1e-9)
    if "shifted_offplane" in planes:
        assert set(planes["shifted_offplane"]["trajectories"]) == {"shifted"}


def test_shift_conditions_are_theory_plus_offsets():
    base = theory_shift("gelu")
    conditions = shift_conditions("gelu", [-0.1, 0.0, 0.1], include_zero=True)
    assert list(conditions.values()) == sorted([0.0] + [round(base + o, 6) for o in (-0.1, 0, 0.1)])
    assert f"b={round(base, 6):+.4f}" in conditions
    assert 0.0 not in shift_conditions("gelu", [0.0], include_zero=False).values()


def test_settings_and_condition_checks_name_the_field():
    for overrides, name in (({"d": 0}, "d"), ({"lr": -1.0}, "lr"), ({"log_points": 1}, "log_points"),
                            ({"loss": "ce"}, "loss"), ({"dtype": "bfloat16"}, "dtype"),
                            ({"norm": "mid"}, "norm")):
        with pytest.raises(ConfigError) as info:
            ModelSettings(**overrides)
        assert info.value.field == name
    with pytest.raises(ConfigError, match="plain names"):
        check_plain_activations("activations", ["relu", "gelu:shift=0.1"])
    with pytest.raises(ConfigError, match="must contain 0"):
        check_shift_offsets([-0.1, 0.1])
    assert ModelSettings().train_settings().loss == "mse"
