"""One key's slow schema beside another key's small constrained request (issue 50), in one process.

    python -m agentgate.loadtests.grammar_fairness [--rounds 3] [--bound 6000]

Two engines on the default model: one compiling grammars on a single worker (``--grammar-compile-workers
1``: how every compile ran before issue 50, one queue for all keys), one on the default four (a key
on at most two). Each round, on each engine in turn: key ``a`` asks for a schema whose pattern
repeats up to ``--bound`` characters (xgrammar takes seconds over it), and 50 ms later key ``b``
asks for a small schema of its own; both are new each round (nothing cached). Prints b's latency
(request to its last token, 8 greedy tokens) and a's compile time, medians over the rounds, and
b's latency ratio of the single worker to the fair pool. Run it alone: it measures CPU time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.sampling_params import StructuredOutput

WAYS = {"single worker (before)": 1, "fair pool (4 workers)": 4}


def one_round(llm: LLM, bound: int, salt: int) -> tuple[float, float]:
    """(b's latency, a's time to its grammar), seconds, for one slow schema beside one small one."""
    core = llm.core
    prompt = llm.tokenizer.encode("Describe a user of a web site as JSON.")
    slow = {"type": "object", "properties": {f"a{salt}": {"type": "string", "pattern": f"[a-z]{{1,{bound}}}"}}}
    small = {"type": "object", "properties": {f"b{salt}": {"type": "integer"}}, "required": [f"b{salt}"]}
    params = [
        SamplingParams(temperature=0, max_tokens=8, structured=StructuredOutput(json_schema=json.dumps(schema)))
        for schema in (slow, small)
    ]
    started = time.monotonic()
    core.add_request(f"a{salt}", prompt, params[0], tenant="a")
    time.sleep(0.05)
    core.add_request(f"b{salt}", prompt, params[1], tenant="b")
    ended: dict[str, float] = {}
    while core.has_work:
        if core.only_compiling:
            time.sleep(0.005)
        for out in core.step():
            if out.finish_reason is not None:
                ended[out.request_id[0]] = time.monotonic() - started
    return ended["b"] - 0.05, ended["a"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bound", type=int, default=6000, help="the slow pattern's repetition bound")
    args = parser.parse_args()
    engines = {
        way: LLM(runner="sync", grammar_compile_workers=workers, grammar_compile_timeout=600)
        for way, workers in WAYS.items()
    }
    for llm in engines.values():  # each builds its compiler before anything is timed
        llm.generate(["warm"], SamplingParams(max_tokens=1, structured=StructuredOutput(json_object=True)))
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    for i in range(args.rounds):
        for way, llm in engines.items():  # alternated, so the machine's drift falls on both
            results[way].append(one_round(llm, args.bound, salt=i * 10 + len(results[way])))
    for way, runs in results.items():
        b = statistics.median(r[0] for r in runs)
        a = statistics.median(r[1] for r in runs)
        print(f"{way:24s} b's small request {b:6.2f} s   a's slow schema {a:6.2f} s")
    before, after = (statistics.median(r[0] for r in results[way]) for way in WAYS)
    print(f"b's latency, single worker / fair pool: {before / after:.1f}x")


if __name__ == "__main__":
    main()
