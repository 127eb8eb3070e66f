"""Settings: every CLI flag of `agentgate serve` (and of `gateway` and `engine`) also reads from an AGENTGATE_*
variable."""

import dataclasses

import pytest

from agentgate.gateway.command.cli import build_parser, settings_from_args
from agentgate.gateway.config.setting_values import env_name, flag_name
from agentgate.gateway.config.settings import COMMANDS, Settings


def _serve_args(argv, monkeypatch, env=None):
    for key in list(__import__("os").environ):
        if key.startswith("AGENTGATE_"):
            monkeypatch.delenv(key)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    return settings_from_args(build_parser().parse_args(["serve", *argv]))


def test_defaults(monkeypatch):
    s = _serve_args([], monkeypatch)
    assert (s.host, s.port, s.runner, s.api_keys, s.admin_key, s.max_waiting) == (
        "127.0.0.1",
        8000,
        "overlap",
        (),
        None,
        1024,
    )


def test_every_flag_has_an_environment_variable(monkeypatch, tmp_path):
    """Each setting is a flag of every command it names (most of them serve's too)."""
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    commands = build_parser()._subparsers._group_actions[0].choices
    options = {name: {o for action in commands[name]._actions for o in action.option_strings} for name in COMMANDS}
    samples = {"tuple": "a,b", "bool": "true", "int": "7", "float": "0.5"}
    for f in dataclasses.fields(Settings):
        for command in f.metadata["commands"]:
            assert "--" + flag_name(f) in options[command], f"--{flag_name(f)} is not a flag of {command}"
        kind = str(f.type).split("[")[0].split(" ")[0]
        valid = {
            "runner": "sync",
            "tool_call_parser": "hermes",
            "on_engine_death": "exit",
            "prefix_cache_isolation": "key",
            "health_degraded_status": "503",
            "trusted_proxies": "10.0.0.0/8,::1",
            "mcp_servers": "a=http://a.internal/mcp,b=http://b.internal/mcp",
            "mcp_allow_urls": "https://a.internal/mcp/*,http://b.internal:8080/*",
            "reasoning_parser": "qwen3",
            "chat_template": str(template),
            "default_chat_template_kwargs": '{"enable_thinking": false}',
            "max_tokens_overflow": "clamp",
            "hosted_tools": "web_search=a",
            "sealing_key": "0123456789abcdef,fedcba9876543210",
        }
        # Settings checked together: a hosted tool names an MCP server that --mcp-server gives.
        alongside = {"hosted_tools": {"AGENTGATE_MCP_SERVER": "a=http://a.internal/mcp"}}
        raw = valid.get(f.name) or samples.get(kind, "x")
        s = _serve_args([], monkeypatch, {env_name(f): raw, **alongside.get(f.name, {})})
        value = getattr(s, f.name)
        expected = {
            "tuple": tuple(raw.split(",")),
            "bool": True,
            "int": int(raw) if kind == "int" else 0,
            "float": 0.5,
        }.get(kind, raw)
        assert value == expected, f"{env_name(f)}={raw!r} gave {f.name}={value!r}"


def test_flags_win_over_the_environment_and_repeat(monkeypatch):
    s = _serve_args(
        ["--port", "9001", "--api-key", "k1", "--api-key", "k2,k3", "--allow-credentials", "--max-model-len", "512"],
        monkeypatch,
        {"AGENTGATE_PORT": "9000", "AGENTGATE_API_KEY": "env-key", "AGENTGATE_RUNNER": "sync"},
    )
    assert s.port == 9001 and s.api_keys == ("k1", "k2", "k3") and s.allow_credentials and s.runner == "sync"
    assert s.max_model_len == 512


def test_engine_config_carries_the_engine_flags(monkeypatch):
    s = _serve_args(["--runner", "null", "--max-num-seqs", "8", "--null-step-seconds", "0.01"], monkeypatch)
    config = s.engine_config()
    assert (config.runner, config.max_num_seqs, config.null_step_seconds, config.model) == ("null", 8, 0.01, None)


def test_the_wait_bound_is_a_flag_of_serve_and_engine_and_reaches_the_engine(monkeypatch):
    assert _serve_args([], monkeypatch).engine_config().max_wait == "auto"
    assert _serve_args(["--max-wait", "2.5"], monkeypatch).engine_config().max_wait == "2.5"
    engine = build_parser().parse_args(["engine", "--max-wait", "3"])
    assert settings_from_args(engine).engine_config().max_wait == "3"
    for bad in ("0", "soon", "inf"):
        with pytest.raises(ValueError, match="max_wait"):
            _serve_args(["--max-wait", bad], monkeypatch).engine_config()


def test_the_step_budget_is_a_flag_of_serve_and_engine_and_reaches_the_engine(monkeypatch):
    assert _serve_args([], monkeypatch).engine_config().max_step_ms == "off"
    assert _serve_args(["--max-step-ms", "40"], monkeypatch).engine_config().max_step_ms == "40"
    engine = build_parser().parse_args(["engine", "--max-step-ms", "off"])
    assert settings_from_args(engine).engine_config().max_step_ms == "off"
    assert _serve_args([], monkeypatch, {"AGENTGATE_MAX_STEP_MS": "25"}).engine_config().max_step_ms == "25"
    with pytest.raises(ValueError, match="max_step_ms"):
        _serve_args(["--max-step-ms", "soon"], monkeypatch).engine_config()


def test_the_cache_dir_and_remeasure_are_flags_of_serve_and_engine_and_reach_the_engine(monkeypatch, tmp_path):
    config = _serve_args([], monkeypatch).engine_config()
    assert (config.cache_dir, config.remeasure) == (None, False)  # None: the XDG default, at the engine
    for command in ("serve", "engine"):
        args = build_parser().parse_args([command, "--cache-dir", str(tmp_path), "--remeasure"])
        config = settings_from_args(args).engine_config()
        assert (config.cache_dir, config.remeasure) == (str(tmp_path), True)
    assert _serve_args([], monkeypatch, {"AGENTGATE_CACHE_DIR": "/c"}).engine_config().cache_dir == "/c"


def test_keys_stay_out_of_repr():
    assert "secret" not in repr(Settings(api_keys=("secret",), admin_key="secret"))


@pytest.mark.parametrize("argv", [["--runner", "warp"], ["--port", "x"], ["--max-waiting", "-1"]])
def test_bad_values_are_rejected(monkeypatch, argv):
    with pytest.raises((ValueError, SystemExit)):
        _serve_args(argv, monkeypatch)
