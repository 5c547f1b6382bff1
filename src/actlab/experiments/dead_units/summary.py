"""The ``dead-units`` summary: dead shares and costs per shallow run, the deep stack's shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.analysis import mean_or_nan, seeds_in

if TYPE_CHECKING:
    from actlab.experiments.dead_units import DeadUnitsConfig

# the shallow runs in order (large rate, small rate, leaky): (activation, rate field)
SHALLOW_ROLES = (("relu", "lr_large"), ("relu", "lr_small"), ("leaky_relu", "lr_large"))


def shallow_runs(config: DeadUnitsConfig) -> dict[str, tuple[str, str]]:
    """Run name -> (activation, rate field), each named by the rate it trains at
    (``relu-lr4``, ``relu-lr0.5``, ``leaky_relu-lr4`` by default), so a ``--set`` of a rate
    renames its runs instead of leaving a label that is no longer true."""
    return {f"{act}-lr{getattr(config, field):g}": (act, field) for act, field in SHALLOW_ROLES}


def build_summary(config: DeadUnitsConfig, table) -> dict:
    """Per shallow run the dead share after epoch 1 and the last epoch and the final cost
    (mean over seeds, and per seed); the deep stack's shares."""
    seeds = seeds_in(table)
    summary: dict = {"seeds": seeds, "epochs": config.epochs, "shallow": {}}

    def per_seed(run: str, metric: str, step: int) -> list[float]:
        """``metric`` at ``step`` per seed; nan where the run stopped before it (diverged)."""
        sel = table[(table["run"] == run) & (table["metric"] == metric)
                    & (table["step"] == step) & (table["layer"] == "")]
        values = [sel[sel["seed"] == s]["value"] for s in seeds]
        return [float(v.iloc[0]) if len(v) else float("nan") for v in values]

    for run in shallow_runs(config):
        entry = {
            "dead_share_epoch1": per_seed(run, "dead_share", 1),
            f"dead_share_epoch{config.epochs}": per_seed(run, "dead_share", config.epochs),
            "inactive_share_last": per_seed(run, "inactive_share", config.epochs),
            "final_cost": per_seed(run, "cost", config.epochs),
        }
        entry["mean"] = {k: mean_or_nan(v) for k, v in entry.items()}
        summary["shallow"][run] = entry
    deep = table[(table["run"] == "deep")]
    last = str(config.deep_depth)

    def last_layer(metric: str) -> list[float]:
        return [float(deep[(deep["seed"] == s) & (deep["layer"] == last)
                           & (deep["metric"] == metric)]["value"].iloc[0]) for s in seeds]

    summary["deep"] = {
        "dead_share": per_seed("deep", "dead_share", 0),
        "last_layer_full": last_layer("dead_share"),
        "last_layer_one_batch": last_layer("dead_share_one_batch"),
    }
    summary["deep"]["mean"] = {k: mean_or_nan(v) for k, v in summary["deep"].items()}
    return summary
