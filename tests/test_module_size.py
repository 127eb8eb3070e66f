"""Small modules, one concept each: no Python module of the project's packages is over 400 lines
(a module that grows past it is split along a seam, not cut anywhere)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "gateway", "agents", "loadtests")
MAX_LINES = 400


def _over(limit: int) -> list[str]:
    return sorted(
        f"{path.relative_to(ROOT)}: {lines} lines"
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > limit
    )


def test_no_module_is_over_400_lines():
    assert _over(MAX_LINES) == []


def test_the_check_reads_every_package_and_sees_a_long_module():
    assert all(any((ROOT / p).rglob("*.py")) for p in PACKAGES)
    assert len(_over(300)) > 0  # the largest modules are near the limit: the count is of real files
