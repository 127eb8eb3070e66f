"""LoRA adapters through both runners in the slot form with the Triton kernel itself
(`engine.lora.slots`, `engine.kernels.lora.add_lora`): on the CPU under TRITON_INTERPRET=1
(tests/conftest.py), on CUDA (``gpu``) as the engine runs it there. A tiny random model in float32,
three adapters stored and two slots: a batch mixing them and the base model gives each request what
it gets alone (the scheduler holds the third adapter's rows a step), and on the CPU what the
segmented form gives."""

from __future__ import annotations

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.lora import synthetic
from agentgate.engine.sampling_params import SamplingParams

# tests/engine/runner/conftest.py's TINY_LLAMA: hidden 64, 4 heads of 16, 2 KV heads, MLP 128, 2 layers.
TINY = {"hidden": 64, "q": 64, "kv": 32, "inter": 128, "layers": 2}
PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
PROMPTS = {"r0": [5, 6, 7, 8], "r1": [9, 10, 11], "r2": [12, 13, 14, 15, 16], "r3": [17, 18]}
LORAS = {"r0": "a", "r1": "b", "r2": "", "r3": "c"}


@pytest.fixture(scope="module")
def adapter_modules(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-adapters")
    ranks = {"a": 4, "b": 2, "c": 4}
    return tuple(
        f"{name}={synthetic.write_adapter(root / name, TINY, rank=rank, seed=i, std=0.3)}"
        for i, (name, rank) in enumerate(ranks.items())
    )


def make_core(model_dir, adapter_modules, runner: str, device: str, kernel_form: bool) -> EngineCore:
    overlap = {"steps_in_flight": 2} if runner == "overlap" else {}
    config = EngineConfig(
        model=str(model_dir),
        load_format="dummy",
        runner=runner,
        device=device,
        dtype="float32",
        block_size=4,
        num_kv_blocks=64,
        max_step_ms="off",
        lora_modules=adapter_modules,
        max_loras=2,
        max_cpu_loras=3,
        max_lora_rank=4,
        **overlap,
    )
    core = EngineCore(config)
    lora = core.runner.lora
    if kernel_form and lora.slots is None:  # the CPU: the form CUDA takes by itself
        from agentgate.engine.kernels.lora import add_lora

        lora.use_slots(add_lora)
    assert (lora.slots is not None) == kernel_form
    return core


def run(core: EngineCore, loras: dict[str, str]) -> dict[str, list[int]]:
    """Greedy tokens of the requests ``loras`` names (request id -> adapter, "" for the base model)."""
    tokens: dict[str, list[int]] = {}
    for request_id, lora in loras.items():
        core.add_request(request_id, PROMPTS[request_id], PARAMS, lora=lora)
    for _ in range(200):
        if not core.has_work:
            break
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
    assert not core.has_work
    return tokens


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)], ids=["cpu-interpreted", "cuda"]
)
@pytest.mark.parametrize("runner", ["sync", "overlap"])
def test_a_mixed_batch_through_the_slots_and_the_kernel_gives_each_request_what_it_gets_alone(
    tiny_model_dir, adapter_modules, runner, device
):
    core = make_core(tiny_model_dir, adapter_modules, runner, device, kernel_form=True)
    mixed = run(core, LORAS)
    assert core.stats().num_lora_held_steps > 0 and core.runner.lora.slots.num_copies >= 3
    alone = {request_id: run(core, {request_id: lora})[request_id] for request_id, lora in LORAS.items()}
    assert mixed == alone
    assert run(core, {"r0": ""})["r0"] != mixed["r0"]  # the adapter changes the output
    if device == "cpu":
        segmented = make_core(tiny_model_dir, adapter_modules, runner, device, kernel_form=False)
        assert run(segmented, LORAS) == mixed
