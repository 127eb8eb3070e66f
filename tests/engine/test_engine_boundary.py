"""The engine's modules import one way: no cycle, not even one that only type checking or a
function-level import would close (tests/support/imports.py reads them all from the source,
and counts an import of ``a.b.c`` as one of the package ``a.b`` too). The layers are plain
math: they take numbers, not the model's config, and measure nothing at load."""

from __future__ import annotations

from tests.support.imports import find_cycle, package_imports

ENGINE = "agentgate.engine"
# What a layer may import of the engine: other layers and the kernels they call.
LAYER_NEIGHBOURS = (f"{ENGINE}.layers", f"{ENGINE}.kernels")


def test_no_import_cycle_inside_the_engine_not_even_for_type_checking():
    graph = package_imports(ENGINE)
    assert len(graph) > 50 and "agentgate.engine.runner.input_prep" in graph["agentgate.engine.runner.overlap"]
    assert find_cycle(graph) is None, "import cycle: " + " -> ".join(find_cycle(graph) or [])


def test_the_check_finds_a_cycle_closed_by_a_type_checking_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_an_import_of_a_module_counts_as_one_of_the_packages_above_it():
    """``from agentgate.engine.kernel_choice.row_choice import ...`` runs ``kernel_choice/__init__``
    first; a module's own packages are loaded before it runs and are no import of it."""
    graph = package_imports(ENGINE)
    assert {f"{ENGINE}.kernel_choice", f"{ENGINE}.kernel_choice.row_choice"} <= graph[f"{ENGINE}.runner.base"]
    assert f"{ENGINE}.kernel_choice" not in graph[f"{ENGINE}.kernel_choice.decode_exactness"]


def _outside_the_layers(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {imported}"
        for module, imports in graph.items()
        if module.startswith(f"{ENGINE}.layers")
        for imported in imports
        if not imported.startswith(LAYER_NEIGHBOURS)
    )


def test_layers_import_no_model_config_no_kernel_choice_nothing_above_them():
    """A layer is built from plain numbers (``rope_tables(head_dim, max_position, base)``), as
    nano-vllm's ``get_rope``; load-time measuring and its disk cache are `engine.kernel_choice`'s."""
    graph = package_imports(ENGINE)
    assert len([m for m in graph if m.startswith(f"{ENGINE}.layers.")]) >= 6
    assert _outside_the_layers(graph) == []


def test_the_layer_check_sees_an_import_of_the_model_config():
    graph = package_imports(ENGINE)
    graph[f"{ENGINE}.layers.rope"] = graph[f"{ENGINE}.layers.rope"] | {f"{ENGINE}.models.config"}
    graph[f"{ENGINE}.layers.norm"] = graph[f"{ENGINE}.layers.norm"] | {f"{ENGINE}.kernel_choice.row_choice"}
    assert _outside_the_layers(graph) == [
        f"{ENGINE}.layers.norm imports {ENGINE}.kernel_choice.row_choice",
        f"{ENGINE}.layers.rope imports {ENGINE}.models.config",
    ]
