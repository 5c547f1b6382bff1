"""The number-format normaliser and the section finder behind ``tools/fidelity.py --sources``."""

from __future__ import annotations

import math

import pytest

from actlab.runner.quoted_numbers import (
    cited_windows,
    find_quoted,
    locator_keys,
    numbers_in,
    same_number,
)


@pytest.mark.parametrize("text, expected", [
    ("4.73 × 10⁻⁴", [4.73e-4]),
    (r"4.73 \times 10^{-4}", [4.73e-4]),
    ("$3.233$", [3.233]),
    ("0.2300.230", [0.230]),
    ("77.45∘77.45 76.25∘76.25", [77.45, 76.25]),
    ("overshoots around step 100100, then 1111 and 2020 and 123124", [100.0, 1111.0, 2020.0,
                                                                      123124.0]),
    ("22.7% of 1,000 units, 60 % of 5", [0.227, 1000.0, 0.6, 5.0]),
    ("(50,200,20)", [50.0, 200.0, 20.0]),
    ("lr 1e-3 and −0.5", [1e-3, -0.5]),
    ("Figure 9, Table 2, §3 and eq. (12) show 0.5 (3.5)", [0.5, 3.5]),
    ("yields 55–74% sparsity, up to $\\sim 28\\%$", [0.55, 0.74, 0.28]),
])
def test_numbers_are_read_in_every_format_the_documents_use(text, expected):
    values = [v for v, _ in numbers_in(text)]
    assert len(values) == len(expected)
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(values, expected)), values


def test_a_quoted_fraction_matches_its_percentage_and_nothing_else():
    (written, _), = numbers_in("22.7%")
    assert same_number(0.227, written) and same_number(3.233, 3.233)
    assert not same_number(0.227, 0.23)
    assert not same_number(0.01, 1.0)  # a bare 1 is not 1%
    assert not same_number(1.8e-12, 0.0)  # no absolute slack for tiny numbers


def test_locators_become_search_keys():
    assert locator_keys("App. D.6, Table 4; eq. 61") == ["D.6", "Table 4", "(61)"]
    assert locator_keys("§3.2, Fig. 3") == ["3.2", "Figure 3"]
    assert locator_keys("Dead ReLUs") == ["Dead ReLUs"]


DOCUMENT = ("1 Introduction We use 100 seeds. " + "filler " * 1000
            + "Table 2: angles 77.45∘77.45 and 46.58∘46.58 " + "filler " * 1000
            + "a stray 12.5 outside")


def test_a_number_is_found_in_its_section_elsewhere_or_not_at_all():
    assert find_quoted(DOCUMENT, "Table 2", 46.58).place == "section"
    assert "77.45" in find_quoted(DOCUMENT, "Table 2", 77.45).context
    assert find_quoted(DOCUMENT, "Table 2", 100).place == "elsewhere"
    assert find_quoted(DOCUMENT, "Table 2", 3.14).place == "missing"
    assert find_quoted(DOCUMENT, "Table 3", 46.58).place == "elsewhere"  # no such section
    assert cited_windows(DOCUMENT, "Table 9") == []


def test_a_section_number_is_found_as_a_heading_not_as_any_digit():
    doc = ("5 Results the factor of 6 and Figure 6 show 0.5 " + "x " * 3000
           + "6 Spike Amplification the range grows 25-fold " + "y " * 3000 + "§7 says 9")
    assert find_quoted(doc, "§6", 25).place == "section"
    assert find_quoted(doc, "§6", 0.5).place == "elsewhere"  # "of 6", "Figure 6": no heading
    assert find_quoted(doc, "§7", 9).place == "section"
