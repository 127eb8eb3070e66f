"""The engine's modules import one way: no cycle, not even one that only type checking or a
function-level import would close (tests/support/imports.py reads them all from the source)."""

from __future__ import annotations

from tests.support.imports import find_cycle, package_imports


def test_no_import_cycle_inside_the_engine_not_even_for_type_checking():
    graph = package_imports("agentgate.engine")
    assert len(graph) > 50 and "agentgate.engine.runner.input_prep" in graph["agentgate.engine.runner.overlap"]
    assert find_cycle(graph) is None, "import cycle: " + " -> ".join(find_cycle(graph) or [])


def test_the_check_finds_a_cycle_closed_by_a_type_checking_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
