"""An engine the tests start remembers its measurements under the tests' throwaway XDG_CACHE_HOME
(tests/conftest.py), and writes nothing into a home: `agentgate engine --remeasure` on the default
model, with HOME an empty directory, and the real home's cache compared before and after. What the
crossover came to is a timing (taken beside the other worker's load) or this CPU's lack of a bf16
matmul, so the test checks the rule instead: the engine's copies follow the crossover it wrote."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from agentgate.engine.kernel_choice.row_choice_cache import FILE_NAME
from agentgate.engine.kernel_choice.row_invariance import CHECK_REVISION
from tests.support.http import wait_for
from tests.support.servers import launch_command


def listing(directory: Path) -> dict[str, float]:
    """Each file under ``directory`` and when it last changed."""
    return {str(p): p.stat().st_mtime for p in directory.rglob("*")} if directory.is_dir() else {}


def test_an_engine_started_by_the_tests_writes_its_cache_under_xdg_cache_home_only(tmp_path):
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "agentgate" / FILE_NAME
    real_home_cache = listing(Path.home() / ".cache" / "agentgate")
    home = tmp_path / "home"
    home.mkdir()
    started = time.time()
    flags = ("--max-model-len", "256", "--num-kv-blocks", "64", "--max-num-seqs", "4", "--remeasure")
    engine = launch_command(
        tmp_path, "engine", "engine", "--address", f"ipc://{tmp_path}/e.sock", *flags, env={"HOME": str(home)}
    )
    try:
        wait_for(lambda: "ready on" in engine.log(), timeout=180, message="the engine to load")
    finally:
        engine.stop()
    entries = json.loads(cache.read_text())
    fresh = {key: entry for key, entry in entries.items() if entry["measured_at"] >= started}
    kinds = {key.split("|")[0] for key in fresh}
    # The rule, whatever this machine and the other worker's load made of the crossover: the engine
    # did what the crossover it wrote says. None written: dense cannot run here (float32 activations
    # where the CPU has no bf16 matmul), nothing measured; None measured: dense never faster; a row count.
    crossovers = [entry["value"] for key, entry in fresh.items() if key.startswith("crossover|")]
    copies: set[str] = set()  # no dense copy: no prompt-row verdict to make
    if not crossovers:
        assert re.search(r"quantized matmuls at every batch size \((?!measured)", engine.log()), engine.log()
    elif crossovers == [None]:
        assert "quantized matmuls at every batch size (measured" in engine.log()
        assert "dense bf16 never faster" in engine.log() and "MiB of dense copies" not in engine.log()
    else:
        [crossover] = crossovers
        assert f"dense bf16 from {crossover} (measured" in engine.log() and "MiB of dense copies" in engine.log()
        copies = {f"prompt rows {CHECK_REVISION}"}
    # Written by this engine (--remeasure rewrote them): the decode rows' verdicts are --speculative auto's;
    # where no decode row depends on its batch, a verify step is checked against plain decoding too.
    invariant = [entry["value"] for key, entry in fresh.items() if key.startswith("decode rows<=28|")]
    drafted = ["drafted rows"] if invariant and all(invariant) else []
    assert kinds == {*(["crossover"] if crossovers else []), "decode rows<=28", *copies, *drafted}
    assert ("a verify step checked against plain decoding" in engine.log()) == bool(drafted), engine.log()
    assert list(home.iterdir()) == []
    assert listing(Path.home() / ".cache" / "agentgate") == real_home_cache
