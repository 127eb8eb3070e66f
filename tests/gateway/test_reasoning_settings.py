"""The reasoning and chat-template settings (gateway.config.reasoning_settings): bad values are
start-up errors naming them; the command exits 2."""

import pytest

from agentgate.gateway.config.settings import Settings
from tests.support.servers import run_agentgate

QWEN_LIKE = """{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% else %}<think>
{% endif %}{% endif %}"""


def test_good_values_are_kept(tmp_path):
    template = tmp_path / "qwen.jinja"
    template.write_text(QWEN_LIKE)
    settings = Settings(
        reasoning_parser="qwen3",
        reasoning_budget=64,
        chat_template=str(template),
        default_chat_template_kwargs='{"enable_thinking": false}',
    )
    assert settings.reasoning_parser == "qwen3" and settings.reasoning_budget == 64
    assert Settings().reasoning_parser == "auto"


def test_bad_values_name_themselves(tmp_path):
    with pytest.raises(ValueError, match="unknown reasoning parser 'qwen4'"):
        Settings(reasoning_parser="qwen4")
    with pytest.raises(ValueError, match="reasoning_budget must be 0 or more, got -1"):
        Settings(reasoning_budget=-1)
    with pytest.raises(ValueError, match="must be a JSON object"):
        Settings(default_chat_template_kwargs="[1]")
    with pytest.raises(ValueError, match="is not JSON"):
        Settings(default_chat_template_kwargs="{enable_thinking: false}")
    with pytest.raises(ValueError, match="cannot be read"):
        Settings(chat_template=str(tmp_path / "missing.jinja"))


def test_a_template_that_does_not_render_names_its_file_and_line(tmp_path):
    syntax = tmp_path / "syntax.jinja"
    syntax.write_text("{% for m in messages %}\n{{ m.content }}\n{% endfor %\n")
    with pytest.raises(ValueError, match=rf"chat template {syntax}, line 3 does not render"):
        Settings(chat_template=str(syntax))
    failing = tmp_path / "failing.jinja"
    failing.write_text("{{ messages[0].content }}\n\n{{ raise_exception('no system message') }}\n")
    with pytest.raises(ValueError, match=rf"chat template {failing}, line 3 does not render: no system message"):
        Settings(chat_template=str(failing))


def test_the_command_exits_2_naming_the_parser():
    out = run_agentgate("serve", "--runner", "null", "--reasoning-parser", "qwen4")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "unknown reasoning parser 'qwen4'" in out.stderr
