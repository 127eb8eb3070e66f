"""`python -m agentgate.loadtests.lm_head_quant`: the LM head in int4 against the file's Q8_0."""

from __future__ import annotations

import re

from agentgate.loadtests import lm_head_quant
from agentgate.loadtests.lm_head_quant import first_divergence, user_messages
from tests.support.tiny_models import tiny_llama_dir


def test_the_table_covers_every_form_and_comparison(tmp_path, capfd):
    flags = "--load-format dummy --prompts 6 --max-tokens 4 --steps 2 --rounds 1"
    lm_head_quant.main(["--model", str(tiny_llama_dir(tmp_path)), *flags.split()])
    out = capfd.readouterr().out
    rows = re.findall(
        r"^(dense|Q8_0 head \(stored\)|int4 head|int4 head, Q8_0 lookup) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +\d",
        out,
        re.M,
    )
    assert [r[0] for r in rows] == ["dense", "Q8_0 head (stored)", "int4 head", "int4 head, Q8_0 lookup"], out
    for _, weights, head, head_ms, step_ms in rows:
        assert 0 < float(head) < float(weights) and float(head_ms) > 0 and float(step_ms) > 0
    # Dummy weights are dense as stored; int4 quantizes every linear, the head included: fewer bytes.
    assert float(rows[2][1]) < float(rows[1][1]) and float(rows[2][2]) < float(rows[1][2])
    assert rows[3][1:3] == rows[2][1:3]  # the lookup reads a few rows per step: the same bytes
    compared = re.findall(r"^  (.+?) +(\d+) of 6 replies differ; first divergence at token 0-3: (\d+), ", out, re.M)
    assert [c[0] for c in compared] == [
        "int4 weights as stored vs dense (the bar)",
        "int4 head vs Q8_0 head",
        "int4 head vs dense",
        "int4 head, Q8_0 lookup vs Q8_0 head",
        "int4 head, Q8_0 lookup vs dense",
    ], out
    assert all(int(bucket) <= int(differ) <= 6 for _, differ, bucket in compared)


def test_divergence_is_the_first_differing_token():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 5, 3], [1, 2, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # one reply ended where the other went on


def test_the_prompts_are_fixed_and_distinct():
    prompts = user_messages(200)
    assert len(set(prompts)) == 200 and prompts == user_messages(200)
    assert prompts[0] == "Explain the moon to a child."
