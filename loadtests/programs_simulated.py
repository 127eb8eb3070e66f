"""``agent_programs``' workload on the null runner in virtual time: the servers' returning-turn hit
rate, JCT and waits in seconds of computing, where a live round takes minutes.

    python -m agentgate.loadtests.programs_simulated [--seeds 8] [--max-wait auto] [--retention-fraction 0.5]

The engine core (scheduler, retention, program admission, wait bound) runs as served; only the model
is left out. Each step advances a virtual clock by a modeled time, fitted to the default model on this
project's 2-core CPU (a live ``agent_programs`` round under pressure): ``STEP_S`` + ``ROW_S`` a
scheduled row + ``PROMPT_TOKEN_S`` a prompt token computed. The agents are ``agent_programs``' as
served: a first prompt of ``FIRST_PROMPT`` tokens (its own: no two agents share a block), replies of
``CALL_TOKENS`` to a forced call, tool results of ``RESULT_TOKENS``, a last answer of
``ANSWER_TOKENS``, tool latencies log-normal (median 1 s, sigma 0.8, cut at 10 s), all agents starting
together, in ``--num-kv-blocks`` (by default ``agent_programs``' own: 283 blocks for 12 x 5, where the agents'
final conversations take about 57 blocks each).

It is a design tool, not the figures: it says in seconds which way a change to the scheduling moves
the live benchmark's figures (and it moved them so for issue 51's changes, ``docs/agent-programs.md``).
Printed per server: medians over ``--seeds`` runs.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.front.protocol import ProgramTag
from agentgate.engine.runner.null import NullRunner
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, SchedulerOutput
from agentgate.loadtests.agent_programs import VARIANTS, default_blocks, quantile

STEP_S, ROW_S, PROMPT_TOKEN_S = 0.030, 0.004, 0.0015
FIRST_PROMPT, CALL_TOKENS, RESULT_TOKENS, ANSWER_TOKENS = 500, 40, 60, 24
IDLE_S = 0.01  # the virtual time a step that runs nothing takes
BLOCK = 16
VOCAB = 30_000


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedNullRunner(NullRunner):
    """The null runner, each step advancing ``clock`` by the modeled time."""

    def __init__(self, clock: VirtualClock, **options: int) -> None:
        super().__init__(**options)
        self.clock = clock

    def execute(self, step: SchedulerOutput) -> ModelRunnerOutput:
        prompt_tokens = step.total_num_tokens - step.num_decode_tokens
        self.clock.now += STEP_S + ROW_S * len(step.scheduled) + PROMPT_TOKEN_S * prompt_tokens
        return super().execute(step)


def engine(flags: list[str], args: argparse.Namespace, clock: VirtualClock) -> EngineCore:
    """An engine core configured as ``agentgate serve`` with ``flags`` (``VARIANTS``' two) would be."""
    options = dict(zip(flags[::2], flags[1::2], strict=True))
    config = EngineConfig(
        block_size=BLOCK,
        kv_retention=options.get("--kv-retention", "auto"),
        scheduling_policy=options.get("--scheduling-policy", "program"),
        kv_retention_max_fraction=args.retention_fraction,
        max_wait=args.max_wait,
    )
    core = EngineCore(config, TimedNullRunner(clock, num_blocks=args.num_kv_blocks, block_size=BLOCK, vocab_size=VOCAB))
    scheduler = core.scheduler
    scheduler.retention.clock = scheduler.retention.wall_clock = scheduler.waiting.clock = clock
    return core


def simulate(flags: list[str], args: argparse.Namespace, seed: int) -> dict[str, float]:
    """One run of ``args.agents`` agents of ``args.turns`` turns; its figures."""
    rng = random.Random(seed)
    clock = VirtualClock()
    core = engine(flags, args, clock)
    prompts = {agent: [rng.randrange(3, VOCAB) for _ in range(FIRST_PROMPT)] for agent in range(args.agents)}
    turn_of = dict.fromkeys(prompts, 0)
    sent: dict[str, float] = {}
    started: dict[int, float] = {}
    arrivals = [(0.0, agent) for agent in prompts]  # (when, agent): turns to send
    first_token_waits, jct, hits, returning = [], [], 0, 0
    while len(jct) < args.agents:
        while arrivals and arrivals[0][0] <= clock.now:
            _, agent = heapq.heappop(arrivals)
            number = turn_of[agent]
            last = number == args.turns - 1
            params = SamplingParams(temperature=0.0, max_tokens=ANSWER_TOKENS if last else CALL_TOKENS, ignore_eos=True)
            tag = ProgramTag(f"agent-{agent}", tools_offered=True, after_tool_calls=number > 0)
            request_id = f"{agent}-{number}"
            core.add_request(request_id, prompts[agent], params, arrival_time=clock.now, program=tag)
            sent[request_id] = clock.now
            started.setdefault(agent, clock.now)
        if not core.has_work:
            clock.now = arrivals[0][0]
            continue
        steps = core.runner.num_steps
        outputs = core.step()
        if core.runner.num_steps == steps:  # nothing could run (held for memory, say): time passes
            clock.now += IDLE_S
        for out in outputs:
            agent, number = map(int, out.request_id.split("-"))
            if out.request_id in sent and out.new_token_ids:
                first_token_waits.append(clock.now - sent.pop(out.request_id))
            if not out.finish_reason:
                continue
            if number > 0:
                returning += len(prompts[agent])
                hits += out.num_cached_tokens
            prompts[agent] += [rng.randrange(3, VOCAB) for _ in range(CALL_TOKENS)]
            if number == args.turns - 1:
                core.turn_ended(f"agent-{agent}", out.request_id, [])
                jct.append(clock.now - started[agent])
                continue
            core.turn_ended(f"agent-{agent}", out.request_id, ["search_docs"])
            prompts[agent] += [rng.randrange(3, VOCAB) for _ in range(RESULT_TOKENS)]
            turn_of[agent] = number + 1
            heapq.heappush(arrivals, (clock.now + min(10.0, rng.lognormvariate(0.0, 0.8)), agent))
    stats = core.stats()
    return {
        "return_hit_rate": hits / returning,
        "jct_p50": quantile(jct, 0.5),
        "jct_p99": quantile(jct, 0.99),
        "longest_wait": max(first_token_waits),
        "longest_passed": stats.longest_wait_passed_s,
        "past_bound": stats.num_waits_past_bound,
        "max_wait_s": stats.max_wait_s,
        "preemptions": stats.num_preemptions,
        "pins_released_for_memory": stats.retention.released_pressure,
    }


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m agentgate.loadtests.programs_simulated", description=__doc__.split("\n")[0]
    )
    p.add_argument("--agents", type=int, default=12)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--seeds", type=int, default=8, help="runs per server (medians printed)")
    p.add_argument("--num-kv-blocks", type=int, default=None, help="default: agent_programs' (about half fit)")
    p.add_argument("--max-wait", default="auto", help="as the server's --max-wait")
    p.add_argument("--retention-fraction", type=float, default=0.8, help="as --kv-retention-max-fraction")
    args = p.parse_args()
    if args.num_kv_blocks is None:
        args.num_kv_blocks = default_blocks(args)
    print(
        f"{args.agents} agents x {args.turns} turns, KV {args.num_kv_blocks} blocks of {BLOCK}, --max-wait "
        f"{args.max_wait}, --kv-retention-max-fraction {args.retention_fraction}; medians of {args.seeds} seeds"
    )
    for name, flags in VARIANTS.items():
        runs = [simulate(flags, args, seed) for seed in range(args.seeds)]
        medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(f"{name:<14}" + ", ".join(f"{key} {value:.3g}" for key, value in medians.items()), flush=True)


if __name__ == "__main__":
    main()
