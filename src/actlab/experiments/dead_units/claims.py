"""The claims of the ``dead-units`` experiment, read from its summary."""

from __future__ import annotations

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """Compare with the handbook's dead shares and costs (tolerances in each claim)."""
    src = "seed 001, Dead ReLUs"
    epochs = summary["epochs"]
    big = summary["shallow"]["relu-lr4"]["mean"]
    small = summary["shallow"]["relu-lr0.5"]["mean"]
    leaky = summary["shallow"]["leaky_relu-lr4"]["mean"]
    last = f"dead_share_epoch{epochs}"
    out = [
        Claim("ReLU at lr 4.0 loses 62% of its units in epoch 1 and 74% after 30 "
              "(mean over seeds; tolerance 15 points each, and more after 30 than after 1)",
              f"{100 * big['dead_share_epoch1']:.1f}% and {100 * big[last]:.1f}%",
              abs(big["dead_share_epoch1"] - 0.62) <= 0.15 and abs(big[last] - 0.74) <= 0.15
              and big[last] >= big["dead_share_epoch1"], src,
              id=claim_id("dead-units", "relu-lr4", "dead-share-matches-handbook"),
              value=big["dead_share_epoch1"], comparison="compound", threshold=0.15,
              reference=0.62),
        Claim("ReLU at lr 0.5 loses none (below 1%)",
              f"{100 * small['dead_share_epoch1']:.1f}% and {100 * small[last]:.1f}%",
              max(small["dead_share_epoch1"], small[last]) < 0.01, src,
              id=claim_id("dead-units", "relu-lr0.5", "loses-none"),
              value=max(small["dead_share_epoch1"], small[last]), comparison="<",
              threshold=0.01),
        Claim("leaky ReLU at lr 4.0 loses none and reaches a lower cost than ReLU "
              "(0.3638 against 0.4493)",
              f"{100 * leaky[last]:.1f}% dead; cost {leaky['final_cost']:.4f} against "
              f"{big['final_cost']:.4f}",
              leaky[last] == 0.0 and leaky["final_cost"] < big["final_cost"], src,
              id=claim_id("dead-units", "leaky-relu-lr4", "loses-none-lower-cost"),
              value=leaky["final_cost"], comparison="compound", threshold=big["final_cost"]),
    ]
    deep = summary["deep"]["mean"]
    out.append(Claim("a fresh 20x32 He ReLU stack has 22.7% dead units on the 300 training "
                     "points (mean over seeds; tolerance 10 points)",
                     f"{100 * deep['dead_share']:.1f}%",
                     abs(deep["dead_share"] - 0.227) <= 0.10, src,
                     id=claim_id("dead-units", "deep", "fresh-stack-dead-share"),
                     value=deep["dead_share"], comparison="within", threshold=0.10,
                     reference=0.227))
    out.append(Claim("last layer: one batch of 20 overstates the dead share (44% vs 41% on "
                     "the whole set); tolerance 15 points, batch estimate >= whole set",
                     f"{100 * deep['last_layer_one_batch']:.1f}% vs "
                     f"{100 * deep['last_layer_full']:.1f}%",
                     deep["last_layer_one_batch"] >= deep["last_layer_full"]
                     and abs(deep["last_layer_full"] - 0.41) <= 0.15, src,
                     id=claim_id("dead-units", "deep", "one-batch-overstates-dead-share"),
                     value=deep["last_layer_one_batch"], comparison="compound",
                     threshold=deep["last_layer_full"]))
    return out
