"""The claims of the ``teacher-student`` experiment, read from its summary."""

from __future__ import annotations

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

SOURCE = "000 §2, App. A-C"


def claims(summary: dict) -> list[Claim]:
    """The seed's claims per activation, with what we measured."""
    rows: list[Claim] = []
    for activation, entry in summary.items():
        if not isinstance(entry, dict) or "final_loss_shifted" not in entry:
            continue
        fu, fs = entry["final_loss_unshifted"], entry["final_loss_shifted"]
        eu, es = entry["early_loss_unshifted"], entry["early_loss_shifted"]
        wins = entry["shifted_wins"]
        rows.append(Claim(
            f"shifted student ends lower ({activation})",
            f"final loss {_fmt(fs)} vs {_fmt(fu)} unshifted; shifted wins {_pct(wins)} of seeds",
            None if fu is None or fs is None else bool(fs < fu and (wins or 0) > 0.5),
            SOURCE, id=claim_id("teacher-student", activation, "shifted-ends-lower"), value=fs,
            comparison="compound", threshold=fu,
        ))
        rows.append(Claim(
            f"unshifted student learns faster early ({activation})",
            f"loss at step {entry['early_step']} (5% of training): {_fmt(eu)} unshifted vs "
            f"{_fmt(es)} shifted; median crossover step {_fmt(entry['crossover_step'])}",
            None if eu is None or es is None else bool(eu < es),
            SOURCE, id=claim_id("teacher-student", activation, "unshifted-faster-early"), value=eu,
            comparison="<", threshold=es,
        ))
        ou, os_ = entry["overshoot_unshifted"], entry["overshoot_shifted"]
        rows.append(Claim(
            f"unshifted hidden state overshoots more ({activation})",
            f"peak deviation from final hidden mean {_fmt(ou)} vs {_fmt(os_)} shifted",
            None if ou is None or os_ is None else bool(ou > os_),
            SOURCE, id=claim_id("teacher-student", activation, "unshifted-overshoots-more"),
            value=ou, comparison=">", threshold=os_,
        ))
        su, ss = entry.get("sharpness_unshifted"), entry.get("sharpness_shifted")
        rows.append(Claim(
            f"shifted student is flatter (final Hessian lambda_max, {activation})",
            f"{_fmt(ss)} shifted vs {_fmt(su)} unshifted",
            None if su is None or ss is None else bool(ss < su),
            SOURCE, id=claim_id("teacher-student", activation, "shifted-flatter"), value=ss,
            comparison="<", threshold=su,
        ))
        first = entry["gradient_angles"].get("1", {})
        if first.get("measured") is not None and first.get("theory") is not None:
            held = abs(first["measured"] - first["theory"]) < 10.0
            rows.append(Claim(
                f"initial gradient angle matches the one-layer theory ({activation})",
                f"angle at k=1: {first['measured']:.1f} deg measured vs "
                f"{first['theory']:.1f} deg theory (held: within 10 deg)",
                held, "000 App. B.2, Table 2",
                id=claim_id("teacher-student", activation, "initial-angle-matches-theory"),
                value=first["measured"], comparison="within", threshold=10.0,
                reference=first["theory"],
            ))
    return rows


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"
