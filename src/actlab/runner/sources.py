"""The documents actlab's claims come from, each with its citation, addressed by a short key.

Every claim names one source: a document whose statement or number it checks, the code the
authors of a document released (a setting found there and not in the text; it has no text
here, so nothing is quoted from it), or :data:`OURS` for what we predicted, chose or found
ourselves (a tolerance, a prototype's observation, a test of our own implementation). Totals
count the documents' (and their code's) and ours apart.

    >>> cite("rethinking", "App. A, Table 1")
    'Peng, Zheng & Liu (2026), "Rethinking Activation Functions: Reducing Bias Can Improve Learning", App. A, Table 1'
"""

from __future__ import annotations

from dataclasses import dataclass

from actlab.errors import did_you_mean


@dataclass(frozen=True)
class Source:
    """One document: its key, title, authors (``""`` when the text names none), year, kind."""

    key: str
    title: str
    authors: str
    year: int | None
    kind: str  # "paper", "handbook page", "notes", "released code" or "ours"
    note: str = ""

    @property
    def citation(self) -> str:
        """Authors (year), "title"; "title" (kind) where the document names no authors."""
        if self.kind == "ours":
            return self.title
        if not self.authors:
            detail = f"{self.kind}, {self.note}" if self.note else self.kind
            return f'"{self.title}" ({detail})'
        when = f" ({self.year})" if self.year else ""
        return f'{self.authors}{when}, "{self.title}"'

    @property
    def is_ours(self) -> bool:
        """Whether the claim is ours rather than a document's."""
        return self.kind == "ours"

    @property
    def is_code(self) -> bool:
        """Whether this is a document's released code (no text to check numbers against)."""
        return self.kind == "released code"


OURS = "actlab"

SOURCES: dict[str, Source] = {s.key: s for s in (
    Source("rethinking", "Rethinking Activation Functions: Reducing Bias Can Improve Learning",
           "Peng, Zheng & Liu", 2026, "paper"),
    Source("handbook", "Activations and initialization", "", None, "handbook page"),
    Source("gated-ffn-notes", "Activations and Gated Feed-Forward Networks", "", None, "notes"),
    Source("bug-or-feature", "Bug or Feature²: Weight Drift and Activation Sparsity", "", 2026,
           "paper", "long version"),
    Source("bug-or-feature-short", "Bug or Feature²: Weight Drift, Activation Sparsity and Spikes",
           "", 2026, "paper", "short version"),
    # The public code released with "Bug or Feature²": settings its text does not state (the
    # GPT-nano learning rate of configs/config.yaml, for one).
    Source("bug-or-feature-code", "Bug or Feature²: Weight Drift and Activation Sparsity", "",
           2026, "released code", "the authors' public code"),
    Source(OURS, "actlab (ours: a prediction, choice or finding of this project)", "", None,
           "ours"),
)}


def source(key: str) -> Source:
    """The :class:`Source` of ``key``; an unknown key raises ``ValueError`` naming the closest."""
    if key not in SOURCES:
        hint = did_you_mean(key, SOURCES, prefix="; ")
        raise ValueError(f"unknown source {key!r}{hint} (valid: {', '.join(SOURCES)})")
    return SOURCES[key]


def cite(key: str, where: str = "") -> str:
    """The citation of ``key`` followed by ``where`` (a section, figure or table) if given."""
    text = source(key).citation
    return f"{text}, {where}" if where else text
