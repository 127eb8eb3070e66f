"""The docs stay true to the tree: every file and folder they name exists, and the walk of one
request in docs/request-walk.md is the one a trace of it sees."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`((?:engine|gateway|agents|loadtests|tests|docs|scripts)/[\w./-]*)`")
BARE = re.compile(r"`(\w+\.py)`")


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_path_a_doc_names_exists(doc: Path):
    text = doc.read_text()
    named = PATH.findall(text)
    assert named or doc.name == "shared-state.md" or doc.name == "README.md", f"{doc.name} names no file"
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"{doc.name} names files that do not exist: {missing}"
    everywhere = {
        f.name for top in ("engine", "gateway", "agents", "loadtests", "tests") for f in (ROOT / top).rglob("*.py")
    }
    gone = [name for name in BARE.findall(text) if name not in everywhere and not (ROOT / name).exists()]
    assert not gone, f"{doc.name} names modules that do not exist: {gone}"


def test_the_request_walk_names_each_file_it_walks_through_in_order():
    text = (ROOT / "docs" / "request-walk.md").read_text()
    table = re.findall(r"^\| (\d+) \| `([^`]+)`", text, re.M)
    assert [int(n) for n, _ in table] == list(range(1, len(table) + 1)) and len(table) <= 20
    for _, path in table:
        assert (ROOT / path).is_file(), path


def test_the_request_walk_embeds_the_walk_a_trace_of_the_request_sees():
    """The doc's tables are the trace's (``AGENTGATE_WRITE_WALK=1`` writes them again)."""
    from tests.support.request_walk import DOC, embedded, tables, traced, write

    written = tables(*traced())
    if os.environ.get("AGENTGATE_WRITE_WALK") == "1":
        write(written)
    assert embedded(DOC.read_text()) == written, "docs/request-walk.md differs from the trace: see its first section"
