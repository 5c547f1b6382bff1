"""Find the numbers a claim credits to a document in the text of the section it cites.

The documents' text comes from PDF or HTML extraction, which writes one number in many
ways: ``4.73 × 10⁻⁴``, ``4.73 \\times 10^{-4}``, ``$3.233$``, ``22.7%`` (0.227), ``1,000`` and,
where a formula was rendered twice, ``0.2300.230``, ``77.45∘77.45`` or ``100100``.
:func:`numbers_in`
reads them all as floats; :func:`cited_windows` cuts the stretches of a document that a
locator such as ``"App. D.6, Table 4"`` points at; :func:`find_quoted` says where a number
turned up: in the cited section, elsewhere in the document, or nowhere.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
# A decimal written twice in a row, possibly with a degree sign between (math rendered twice).
_DOUBLED = re.compile(r"(?<![\d.])(\d+\.\d+?)[∘°]?\1(?![\d])")
# An integer of three digits or more written twice ("around step 100100"); shorter ones are
# left alone, where a repeat ("1111", "2020") is as likely a number of its own.
_DOUBLED_INTEGER = re.compile(r"(?<![\d.,])(\d{3,})\1(?![\d]|[.,]\d)")
_SCIENTIFIC = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*(?:×|\\times|\\cdot|·|x)\s*10\s*"
                         r"(?:\^\s*\{?\s*([-+]?\d+)\s*\}?|([⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+))")
_E_NOTATION = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?[eE][-+]?\d+)(?![\w.])")
_PLAIN = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+(?![,\d])|\d+)(?:\.\d+)?")
_RANGE_PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*%")
WINDOW = 4000  # characters after a locator's mention that count as "its section"


@lru_cache(maxsize=16)  # a check looks up hundreds of numbers in the same few documents
def normalise(text: str) -> str:
    """The text with minus signs, TeX dollars and doubled renderings made plain."""
    text = text.replace("−", "-").replace("–", "-").replace("$", " ").replace("{,}", ",")
    text = text.replace("\\%", "%").replace("\\sim", "~")
    # "55-74%": the percent sign of a range's end belongs to its start too
    text = _RANGE_PERCENT.sub(r"\1% to \2%", text)
    return _DOUBLED_INTEGER.sub(r"\1", _DOUBLED.sub(r"\1", text))


@lru_cache(maxsize=16)
def numbers_in(text: str) -> tuple[tuple[float, int], ...]:
    """Every number in ``text`` as ``(value, position)`` in the normalised text; a number
    written as a percentage (``22.7%``) is read as the fraction (0.227)."""
    text = normalise(text)
    found: list[tuple[float, int]] = []
    taken: list[tuple[int, int]] = []
    for match in _SCIENTIFIC.finditer(text):
        exponent = match.group(2) or match.group(3).translate(_SUPERSCRIPT)
        found.append((float(match.group(1)) * 10.0 ** int(exponent), match.start()))
        taken.append(match.span())
    for match in _E_NOTATION.finditer(text):
        if not any(a <= match.start() < b for a, b in taken):
            found.append((float(match.group(1)), match.start()))
            taken.append(match.span())
    for match in _PLAIN.finditer(text):
        if any(a <= match.start() < b for a, b in taken) or _is_reference(text, match):
            continue
        value = float(match.group(0).replace(",", ""))
        percent = text[match.end():match.end() + 2].lstrip().startswith("%")
        found.append((value / 100.0 if percent else value, match.start()))
    return tuple(sorted(found, key=lambda pair: pair[1]))


_REFERENCE_BEFORE = re.compile(r"(?:Figure|Fig\.|Figs\.|Table|Section|§|Appendix|App\.|Eq\.|eq\.)\s*$")


def _is_reference(text: str, match: re.Match) -> bool:
    """Whether a number names a figure, table, section or equation rather than a quantity."""
    if _REFERENCE_BEFORE.search(text[max(0, match.start() - 12):match.start()]):
        return True
    before, after = text[match.start() - 1:match.start()], text[match.end():match.end() + 1]
    return before == "(" and after == ")" and "." not in match.group(0)  # "(12)": an equation


def same_number(quoted: float, written: float) -> bool:
    """Whether ``written`` (as :func:`numbers_in` reads it) is ``quoted``."""
    return math.isclose(quoted, written, rel_tol=1e-9)  # no absolute slack: 1e-14 is not 0


def locator_keys(where: str) -> list[str]:
    """The strings a locator's parts are searched by: ``"App. D.6, Table 4"`` -> ``["D.6",
    "Table 4"]``; ``"§3.2"`` -> ``["3.2"]``; ``"eq. 61"`` -> ``["(61)"]``; ``"Fig. 3"`` ->
    ``["Figure 3"]``; other parts (a handbook section's title) as they are."""
    keys = []
    for part in re.split(r"[;,]", where):
        part = part.strip()
        if not part:
            continue
        if m := re.match(r"(?:App(?:endix)?\.?|§|Sec(?:tion)?\.?)\s*([A-Z]?\d*(?:\.\d+)*)$", part):
            keys.append(m.group(1))
        elif m := re.match(r"(?:eqs?\.|Eqs?\.|equations?)\s*\(?(\d+)", part):
            keys.append(f"({m.group(1)})")
        elif m := re.match(r"(?:Fig\.|Figs\.|Figure)\s*(\d+)", part):
            keys.append(f"Figure {m.group(1)}")
        elif m := re.match(r"Tab(?:le|\.)\s*(\d+)", part):
            keys.append(f"Table {m.group(1)}")
        else:
            keys.append(part)
    return [k for k in keys if k]


_SECTION_NUMBER = re.compile(r"^[A-Z]?\d*(?:\.\d+)*$")


def _mentions(text: str, key: str) -> list[int]:
    """Where ``key`` starts its part of the text. A section number (``6``, ``4.1``, ``D.6``)
    counts as a heading (the number then a capitalised word, or after ``§``, ``Section``,
    ``Appendix``), never as a digit inside another number or a figure's or table's number."""
    if not _SECTION_NUMBER.match(key):
        return [m.start() for m in re.finditer(re.escape(key), text)]
    k = re.escape(key)
    heading = re.compile(rf"(?<![\w.])(?<!Figure )(?<!Table )(?<!Fig\. ){k}\.?\s+[A-Z][a-z]")
    named = re.compile(rf"(?:§\s*|Section\s+|Appendix\s+|App\.\s*){k}(?![\d.]*\d)")
    headings = [m.start() for m in heading.finditer(text)]  # the section itself, first
    return headings + [m.start() for m in named.finditer(text) if m.start() not in headings]


def cited_windows(document: str, where: str) -> list[tuple[int, int]]:
    """Spans of the normalised ``document`` after each mention of each of ``where``'s keys
    (per key, the headings first, then the cross-references)."""
    text = normalise(document)
    return [(start, min(len(text), start + WINDOW))
            for key in locator_keys(where) for start in _mentions(text, key)]


@dataclass(frozen=True)
class Found:
    """Where a quoted number turned up: ``"section"``, ``"elsewhere"`` or ``"missing"``."""

    value: float
    place: str
    context: str = ""


def find_quoted(document: str, where: str, value: float) -> Found:
    """Look for ``value`` in the cited section of ``document``, then anywhere in it."""
    text = normalise(document)
    hits = [pos for number, pos in numbers_in(document) if same_number(value, number)]
    for a, b in cited_windows(document, where):  # headings before cross-references
        inside = [pos for pos in hits if a <= pos < b]
        if inside:
            return Found(value, "section", _context(text, inside[0]))
    if hits:
        return Found(value, "elsewhere", _context(text, hits[0]))
    return Found(value, "missing")


def _context(text: str, pos: int, width: int = 60) -> str:
    return " ".join(text[max(0, pos - width):pos + width].split())
