"""`python -m agentgate.loadtests.step_budget_bench`: the step budget on vs off, alternating, in one process."""

from __future__ import annotations

import re

from agentgate.loadtests import step_budget_bench
from tests.support.tiny_models import tiny_llama_dir


def test_the_bench_alternates_the_variants_and_prints_the_trade(tmp_path, capfd):
    # A budget of 0.001 ms: a step with decodes carries exactly one block (16 tokens) of prompt.
    flags = (
        "--load-format dummy --max-step-ms 0.001 --concurrency 8 --requests 16 --prompt-tokens 200 --output-tokens 4"
    )
    step_budget_bench.main(["--model", str(tiny_llama_dir(tmp_path)), *flags.split()])
    out = capfd.readouterr().out
    runs = re.findall(r"^round (\d) (on|off)\s*: ITL p50 [\d.]+ ms.*prompt tokens beside decodes max (\d+)", out, re.M)
    assert [(r, v) for r, v, _ in runs] == [("0", "on"), ("0", "off"), ("1", "off"), ("1", "on")]
    beside = {v: int(m) for _, v, m in runs}
    assert beside["on"] == 16 and beside["off"] > 16  # off: the next prompts whole, beside the decodes
    assert re.search(
        r"^on/off: ITL p50 [\d.]+x, ITL p99 [\d.]+x, token gaps p99 [\d.]+x, TTFT p50 [\d.]+x, output tok/s [\d.]+x$",
        out,
        re.M,
    )
    assert re.search(r"^fitted step costs: .* \((\d+) steps observed", out, re.M)
