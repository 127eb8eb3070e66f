"""Every engine cache keyed by what clients send is an LRU bounded in bytes: fed more distinct
keys than its bound holds, it keeps within the bound, the most recent entries kept."""

import json

from agentgate.engine.byte_lru import ENTRY_OVERHEAD_BYTES, ByteLRU
from agentgate.engine.model_files.model_path import resolve_model_path
from agentgate.engine.sampling_params import StructuredOutput
from agentgate.engine.scheduling.programs.table import ProgramTable
from agentgate.engine.scheduling.tool_gaps import ToolGaps
from agentgate.engine.structured.structured_output import GrammarCompiler


def test_byte_lru_forgets_the_least_recently_used_past_its_bound():
    lru = ByteLRU(3 * (10 + ENTRY_OVERHEAD_BYTES))
    for key in "abc":
        lru.put(key, "x" * 10, 10)
    assert lru.get("a") == "x" * 10  # a is now the most recent
    lru.put("d", "x" * 10, 10)
    assert list(lru) == ["c", "a", "d"] and lru.nbytes == lru.max_bytes
    lru.put("c", "x" * 40, 40)  # counted anew: it no longer fits beside two others
    assert list(lru) == ["d", "c"] and lru.nbytes <= lru.max_bytes
    lru.put("huge", "x" * 10_000, 10_000)  # larger than the bound alone: not kept, nothing else lost
    assert "huge" not in lru and list(lru) == ["d", "c"]
    assert lru.pop("d") == "x" * 10 and list(lru) == ["c"]


def test_tool_gap_laws_stay_within_their_bounds_whatever_tool_names_clients_write():
    gaps = ToolGaps(max_tool_bytes=20_000, max_program_bytes=30_000)
    for i in range(2_000):
        gaps.observe(f"program-{i % 50}", f"tool-{i}-" + "n" * (i % 300), 1.0 + i % 7)
    assert gaps._tools.nbytes <= 20_000 and 0 < len(gaps._tools) < 2_000
    assert gaps._programs.nbytes <= 30_000 and 0 < len(gaps._programs) < 2_000
    assert "tool-1999-" + "n" * (1999 % 300) in gaps._tools  # the latest kept
    assert gaps.count == 2_000  # the global law saw every gap


def test_program_records_stay_within_their_bound():
    table = ProgramTable(max_bytes=50_000)
    for i in range(5_000):
        table.touch(f"user:{i:024x}", float(i))
    assert table._records.nbytes <= 50_000 and 0 < len(table) < 5_000
    assert table.get(f"user:{4999:024x}") is not None and table.get(f"user:{0:024x}") is None


def test_the_grammar_compiler_keeps_its_compiled_grammars_and_shortest_replies_within_bounds():
    compiler = GrammarCompiler(resolve_model_path(None), 49152, cache_bytes=200_000, minimum_bytes=1_000)
    try:
        specs = []
        for i in range(8):
            schema = {
                "type": "object",
                "properties": {f"k{i}": {"type": "string", "maxLength": 8}},
                "required": [f"k{i}"],
            }
            specs.append(StructuredOutput(json_schema=json.dumps(schema), max_tokens=50))
            compiler.submit(specs[-1]).result()
        assert compiler._cache.nbytes <= 200_000 and 0 < len(compiler._cache) < 8
        assert compiler._minimum.nbytes <= 1_000 and 0 < len(compiler._minimum) < 8
        unsalted = [("", *spec.kind()) for spec in specs]  # keyed by cache salt and spec
        assert unsalted[-1] in compiler._cache and unsalted[0] not in compiler._cache
        again = compiler.submit(specs[0]).result()  # forgotten, compiled again
        assert again.minimum > 0 and unsalted[0] in compiler._cache
        assert compiler.num_compiles == 9
        compiler.submit(specs[0], cache_salt="s" * 10_000).result()  # the salt is counted in the bound too
        assert compiler._cache.nbytes <= 200_000 and compiler._minimum.nbytes <= 1_000
    finally:
        compiler.shutdown()
