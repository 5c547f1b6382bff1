"""Write ``docs/fidelity.md``: every claim with its statement, source and the numbers quoted
from it, our quick and reference values, and a diagnosis for each miss.

    python tools/fidelity.py                   # write docs/fidelity.md
    python tools/fidelity.py --sources DIR     # check the quoted numbers against the documents
    python tools/fidelity.py --sources DIR --experiments A,B   # ... of these experiments

``--sources`` reads a folder of the documents' text (one file per document, recognised by
its title near the top) and checks that every number a claim quotes appears in the
section, figure or table the claim cites, after normalising the number formats of
extracted text (:mod:`actlab.runner.quoted_numbers`). It prints each match with its context
and each miss, and exits 1 if a number is missing from its document.

Reads ``docs/results/quick_claims.json`` (a quick reproduction), the package's
``references.json`` (the reference runs, see ``tools/collect_references.py``) and
``docs/results/diagnoses.json`` (``{claim id: {"kind": ..., "text": ...}}``, written by
hand: scale, setting, metric, difference, or open where the evidence is not in yet).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from actlab.runner.quoted_numbers import find_quoted  # noqa: E402
from actlab.runner.references import claim_cell, verdict_text  # noqa: E402
from actlab.runner.sources import OURS, SOURCES  # noqa: E402
from actlab.runner.verdicts import SPANS_BAR, TOO_FEW_SEEDS, undecided_kind  # noqa: E402

RESULTS = ROOT / "docs" / "results"
REFERENCES = ROOT / "src" / "actlab" / "runner" / "references.json"
# Numbers the documents state in sections our experiments cite that no claim checks, and why.
UNCHECKED = (
    ('"Rethinking" §4.3', "perplexity 1 % lower with the shift", "lm-shift judges the loss "
     "(about 0.01 lower); perplexity follows from it"),
    ('"Bug or Feature²" §6, App. B.3.1, Table 6', "GPT-nano's Layer 2 ranges 1055.0, 248.7 and "
     "178.3", "absolute ranges of a 124M-parameter GPT on FineWeb; spikes judges the ratios the "
     "paper draws from them (4 to 25x, 4-6x) and the losses (3.251, 3.233, 3.236) on its own "
     "GPT"),
    ('"Bug or Feature²" §4.1; App. C.1 (5)', "GPT-nano's loss nearly flat up to s = 0.91",
     "sparsity's GPT rows judge App. B.2's flat range (11 % to 77 %) and the loss beyond it; "
     "flatness up to 0.91 is not judged: our small GPT's points above 77 % are the 'beyond'"),
    ('"Bug or Feature²" §7; §4.1; App. C.1', "MaxViT 70.30 % -> 69.75 %, MaxViT 70 % -> 67 % "
     "and ResNet 94 % -> 90 % from 10 % to 90 % sparsity", "ImageNet MaxViT-T and CIFAR-10 "
     "ResNet-18 accuracies at the papers' scale; not our models (dit-percentile quotes the DiT's "
     "FID 49.40 -> 48.21 and IS 29.85 -> 31.41; sparsity's per-channel Top-K claim quotes "
     "App. B.2's ResNet-18 at 90.4 % and 74.7 %, not the 94 % -> 90 % fall)"),
    ('"Bug or Feature²" §5.1', "GELU best on four of five classification settings",
     "sparse-activations judges 'most setups' on its own setups, not the paper's five"),
    ('"Activations and Gated Feed-Forward Networks", GLUs and Gated FFNs',
     "d = 6, m = 12, g = 8: 144 weights each", "arithmetic of g = 2m/3, which gated-ffn's "
     "equal-parameter-counts claim checks at its own widths"),
)

# Places where the documents contradict each other, what each says, and what we measure.
DISAGREEMENTS = (
    ("depth order of ReLU's negative drift on random data",
     '"Bug or Feature²" (long version) §3, Fig. 3(a): "earlier layers accumulate more negative '
     'weights"',
     '"Bug or Feature²" (short version), random-data paragraph, Fig. 4: "deeper layers '
     'accumulate more negative weight means"',
     "drift/relu/depth-order/earlier-layers-more-negative and .../deeper-layers-more-negative "
     "judge the slope of the per-layer mean shift over depth; our 5-block MLP shows neither "
     "order (the slope's interval spans 0; reference shifts -1.31, -1.56, -1.62, -1.45, "
     "-1.61 e-3, not monotone)"),
)


def _number(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def evidence_claims() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """``{claim id: [(evidence run, claim), ...]}`` over every kept evidence run
    (``docs/results/<experiment>/evidence-*/claims.json``; a sweep's claim once per point)."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in sorted(RESULTS.glob("*/evidence-*/claims.json")):
        for claim in json.loads(path.read_text()):
            out.setdefault(claim["id"], []).append((path.parent.name, claim))
    return out


def _evidence_cell(found: list[tuple[str, dict[str, Any]]]) -> str:
    """Where the reference run lacks a claim: each evidence run's verdict, named."""
    return "not in the reference run; " + "; ".join(
        f"{run}{' (' + c['point'] + ')' if c.get('point') else ''}: {claim_cell(c)}"
        for run, c in found)


def _reference_ids(references: dict[str, Any]) -> set[str]:
    """Every claim id some reference run judges."""
    return {i for e in references.values() for i in e.get("claims", {})}


def rows(quick: dict[str, Any], references: dict[str, Any], diagnoses: dict[str, Any],
         evidence: dict[str, list[tuple[str, dict[str, Any]]]] | None = None
         ) -> list[list[str]]:
    """One table row per claim id (quick ids, reference-only ids, and ids only evidence runs
    judge), experiment by experiment."""
    evidence = evidence or {}
    ids = sorted(set(quick) | _reference_ids(references) | set(evidence))
    out = []
    for claim_id in ids:
        experiment = claim_id.split("/", 1)[0]
        q, entry = quick.get(claim_id, {}), references.get(experiment, {})
        ref = entry.get("claims", {}).get(claim_id)
        found = evidence.get(claim_id, []) if ref is None else []
        quick_text = claim_cell(q) if q else "—"
        if not q and found:  # the statement, source and quoted numbers from the evidence
            q = {k: v for k, v in found[0][1].items() if k in ("claim", "source", "quoted")}
        if entry.get("status") == "reference" and ref is not None:
            reference, missed = claim_cell(ref), ref["held"] is not True
            full = entry.get("full", {}).get("claims", {}).get(claim_id)
            if full is not None:
                reference += "; --full: " + claim_cell(full)
                missed = missed or full["held"] is not True
        elif found:
            reference = _evidence_cell(found)
            missed = any(c["held"] is not True and not statistically_undecided(c)
                         for _, c in found)
        else:
            reference, missed = entry.get("status", "no reference"), False
        diagnosis = diagnoses.get(claim_id)
        if diagnosis:
            note = f"**{diagnosis['kind']}**: {diagnosis['text']}"
        elif missed and ref is not None and statistically_undecided(ref):
            note = f"**seeds**: {ref.get('reason', '')}"
        else:
            note = "**open**: no diagnosis yet" if missed else ""
        # the document's numbers only; our own predictions (a theory at our setting) apart
        quoted = ", ".join(f"{_number(v)}" for v in (q.get("quoted") or {}).values())
        predicted = ", ".join(f"{_number(v)}" for v in (q.get("predicted") or {}).values())
        out.append([claim_id, q.get("claim", "") or (ref or {}).get("measured", ""),
                    q.get("source", ""), quoted, predicted, quick_text, reference, note])
    return out


STATISTICAL = (TOO_FEW_SEEDS, SPANS_BAR)
RERUN = ("no per-seed sample",)  # kept runs without per-seed data: the sample is missing


def statistically_undecided(claim: dict[str, Any]) -> bool:
    """Undecided for want of seeds (too few, an interval across the bar, no per-seed data
    kept): the reason is its diagnosis."""
    reason = claim.get("reason") or ""
    return claim.get("held") is None and (undecided_kind(reason) in STATISTICAL
                                          or reason.startswith(RERUN))


def _kind(claim: dict[str, Any]) -> str:
    if claim.get("held") is not None:
        return verdict_text(claim.get("held"))
    reason = claim.get("reason") or ""
    if undecided_kind(reason) == TOO_FEW_SEEDS or reason.startswith(RERUN):
        return "too few seeds"
    if undecided_kind(reason) == SPANS_BAR:
        return "spans the bar"
    return "undecided"


def _counts(claims: Any) -> str:
    """'N held, N not held, undecided: N too few seeds, N interval spans the bar, N other'."""
    counts = Counter(_kind(c) for c in claims)
    return (f"{counts['held']} held, {counts['not held']} not held, undecided: "
            f"{counts['too few seeds']} too few seeds (or no per-seed data kept), "
            f"{counts['spans the bar']} interval spans the bar, {counts['undecided']} other")


def render() -> str:
    """The text of docs/fidelity.md."""
    quick_record = json.loads((RESULTS / "quick_claims.json").read_text())
    quick = quick_record["claims"]
    references = json.loads(REFERENCES.read_text())
    diagnoses = json.loads((RESULTS / "diagnoses.json").read_text())
    evidence = evidence_claims()
    table = rows(quick, references, diagnoses, evidence)
    judged = set(quick) | _reference_ids(references)
    only_evidence = [c for i, found in evidence.items() if i not in judged for _, c in found]
    papers = [c for c in quick.values() if c.get("source_key") != OURS]
    ours = len(quick) - len(papers)
    post_hoc = [i for i, c in quick.items() if c.get("post_hoc")]
    ref_items = [(i, c) for e in references.values() if e["status"] == "reference"
                 for i, c in e["claims"].items()]
    ref_claims = [c for _, c in ref_items]
    ref_papers = [c for i, c in ref_items if quick.get(i, {}).get("source_key") != OURS]
    ref_ours = [c for i, c in ref_items if quick.get(i, {}).get("source_key") == OURS]
    deterministic = sum(bool(c.get("deterministic")) for c in quick.values())
    done = [n for n, e in references.items() if e["status"] == "reference"]
    pending = {n: e for n, e in references.items() if e["status"] != "reference"}
    kinds = Counter(d["kind"] for d in diagnoses.values())
    lines = [
        "# Fidelity: which of the papers' findings actlab reproduces",
        "",
        "Generated by `python tools/fidelity.py` from a quick reproduction "
        f"(commit {', '.join(c[:7] for c in quick_record['commits'])}), the reference runs "
        "under `docs/results/` and the hand-written diagnoses in `docs/results/diagnoses.json`.",
        "",
        f"- **Quick scale** ({len(quick)} claims): {_counts(quick.values())}. The documents' "
        f"claims ({len(papers)}): {_counts(papers)}; claims of our own (predictions, choices "
        f"and checks of actlab) ({ours}): {_counts(c for c in quick.values() if c not in papers)}."
        f" {deterministic} claims are judged on one value (closed forms, theory checks, exact "
        "counts); the rest on an interval over seeds.",
        f"- **Reference scale** ({len(done)} of {len(references)} experiments, "
        f"{len(ref_claims)} claims): {_counts(ref_claims)}. The documents' claims "
        f"({len(ref_papers)}): {_counts(ref_papers)}; ours ({len(ref_ours)}): "
        f"{_counts(ref_ours)}.",
        f"- **Judged only in evidence runs** ({len(only_evidence)} verdicts of claims that "
        "neither the quick reproduction nor the reference run makes: optional arms and sweeps, "
        "kept under `docs/results/<experiment>/evidence-*`): "
        f"{_counts(only_evidence)}. Their rows name the evidence run.",
        f"- **Bars chosen after seeing our values** ({len(post_hoc)}, counted in the lines "
        "above and named here so they are read with that in mind): "
        f"{', '.join(post_hoc) if post_hoc else 'none'}.",
        *(["- **Pending**: " + ", ".join(f"{n} — {e['status']}"
                                         for n, e in sorted(pending.items())) + "."]
          if pending else []),
        *(["- **To re-run before their claims can be judged over seeds**: " + "; ".join(
            f"{n}: {e['rerun']}" for n, e in sorted(references.items()) if e.get("rerun"))
            + "."] if any(e.get("rerun") for e in references.values()) else []),
        *[f"- **Also pending**: {n}: {e['note']}" for n, e in sorted(references.items())
          if e["status"] == "reference" and e.get("note")],
        *[f"- **--full scale** ({n}, {e['full']['scale']}, {e['full']['seeds']} seeds): "
          f"{_counts(e['full']['claims'].values())}; shown after the reference value."
          for n, e in sorted(references.items()) if e.get("full")],
        f"- **Diagnoses**: {', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}. "
        "*scale*: the result changes with training length or size (the issue's standard of "
        "evidence is three scale points on the same seeds; where we have two, the diagnosis "
        "says so); *setting*: what differs from the paper's setting and why; *metric*: how we "
        "measure against how the paper does; *difference*: our setting matches and the result "
        "differs; *open*: the evidence is not in yet.",
        "",
        "Reference values are the experiment's default scale (`actlab run EXPERIMENT`). "
        "A claim over seeds is judged on its per-seed sample (docs/runner.md, \"Verdicts over "
        "seeds\"): each cell shows the value, the 95 % interval of the judged quantity "
        "(value minus its bar, per seed) and the number of seeds n. A *seeds* diagnosis is "
        "the reason a claim is undecided for want of seeds: too few, an interval across the "
        "bar (with the seeds that would separate it), or a kept run without per-seed data.",
        "",
        "*number quoted* holds only numbers the cited document states; *our prediction* holds "
        "what actlab predicts at the quick run's setting (a theory of ours, e.g. eq. 61 of "
        "\"Rethinking\" at our width), never a paper's number.",
        "",
        "| claim id | statement | source | number quoted | our prediction | quick | reference "
        "| diagnosis |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table]
    lines += ["", "## Stated numbers no claim checks", "",
              "| document, section | what it states | why no claim checks it |", "|---|---|---|"]
    lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in UNCHECKED]
    lines += ["", "## Where the documents disagree", "",
              "| what | one document | the other | what we measure |", "|---|---|---|---|"]
    lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} | {_cell(d)} |"
              for a, b, c, d in DISAGREEMENTS]
    return "\n".join(lines) + "\n"


def _title_key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower().replace("²", "2"))


def load_documents(folder: Path) -> dict[str, str]:
    """``{source key: text}`` for the documents in ``folder``, recognised by their titles."""
    texts = [p.read_text(errors="replace") for p in sorted(folder.glob("*.txt"))]
    found = {}
    for key, src in SOURCES.items():
        if src.is_ours or src.is_code:  # no text of ours or of released code among them
            continue
        title = _title_key(src.title)
        for text in texts:
            if title in _title_key(text[:600]):
                found[key] = text
                break
    return found


def check_sources(folder: Path, quick: dict[str, Any]) -> int:
    """Print each quoted number's match (with context) or miss; the number of misses."""
    documents = load_documents(folder)
    missing = [k for k, s in SOURCES.items()
               if not (s.is_ours or s.is_code) and k not in documents]
    if missing:
        print(f"no document found in {folder} for: {', '.join(missing)}")
    counts: Counter[str] = Counter()
    for claim_id, claim in sorted(quick.items()):
        for name, value in (claim.get("quoted") or {}).items():
            key, where = claim.get("source_key", ""), claim.get("where", "")
            if key not in documents:
                counts["no document"] += 1
                print(f"miss   {claim_id} {name}={value:g}: no document for {key!r}")
                continue
            found = find_quoted(documents[key], where, value)
            counts[found.place] += 1
            tag = {"section": "match ", "elsewhere": "outside", "missing": "miss  "}[found.place]
            print(f"{tag} {claim_id} {name}={value:g} [{where}]: {found.context}")
    print(f"{sum(counts.values())} quoted numbers: {counts['section']} in the cited section, "
          f"{counts['elsewhere']} elsewhere in the document, {counts['missing']} missing, "
          f"{counts['no document']} without a document")
    return counts["missing"] + counts["no document"]


def judged_claims(names: list[str]) -> dict[str, Any]:
    """Today's claims of each experiment in ``names``, judged on its committed reference
    summary (or, without one, the summary recorded under ``tests/data/claims``)."""
    from actlab.runner.atomic import dumps
    from actlab.runner.experiment import get_experiment

    out: dict[str, Any] = {}
    for name in names:
        path = RESULTS / name / "summary.json"
        if path.exists():
            summary = json.loads(path.read_text())
        else:
            recorded = ROOT / "tests" / "data" / "claims" / f"{name}.json"
            if not recorded.exists():
                print(f"{name}: no committed summary to judge claims on")
                continue
            summary = json.loads(recorded.read_text())["summary"]
        for claim in get_experiment(name).claims(summary):
            out[claim.id] = json.loads(dumps(claim))
    return out


def main() -> None:
    """Write docs/fidelity.md, or check the quoted numbers with ``--sources DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, help="folder of the documents' text")
    parser.add_argument("--experiments", help="A,B: check these experiments' claims as judged "
                                              "on their committed summaries (default: the "
                                              "quick reproduction's claims)")
    args = parser.parse_args()
    if args.sources:
        if args.experiments:
            quick = judged_claims([n for n in args.experiments.split(",") if n])
        else:
            quick = json.loads((RESULTS / "quick_claims.json").read_text())["claims"]
        raise SystemExit(1 if check_sources(args.sources, quick) else 0)
    (ROOT / "docs" / "fidelity.md").write_text(render())


if __name__ == "__main__":
    main()
