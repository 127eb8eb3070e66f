"""Small modules, one concept each: no Python module of the project's packages is over 400 lines
(a module that grows past it is split along a seam, not cut anywhere)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "gateway", "agents", "loadtests")
MAX_LINES = 400
MAX_MODULES_PER_FOLDER = 15
LIBRARY_PACKAGES = ("engine", "gateway", "agents")  # loadtests/ is a folder of scripts, run by name


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


def _crowded(limit: int) -> list[str]:
    """Folders of the packages with more than ``limit`` modules at their top level (``__init__`` not
    counted): a folder by job holds a handful of modules, and a hall of dozens says nothing."""
    folders = {path.parent for package in LIBRARY_PACKAGES for path in (ROOT / package).rglob("*.py")}
    counts = {folder: sum(1 for p in folder.glob("*.py") if p.name != "__init__.py") for folder in folders}
    return sorted(f"{folder.relative_to(ROOT)}: {n} modules" for folder, n in counts.items() if n > limit)


def test_no_folder_keeps_more_than_15_modules():
    assert _crowded(MAX_MODULES_PER_FOLDER) == []


def test_the_folder_check_counts_real_modules():
    assert len(_crowded(10)) > 0  # the fullest folders are near the limit
