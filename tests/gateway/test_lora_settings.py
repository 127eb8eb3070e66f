"""The LoRA flags (gateway/config/lora_settings.py) of serve and engine reach the engine's config."""

from __future__ import annotations

import pytest

from agentgate.gateway.command.cli import build_parser, settings_from_args


def _args(argv, monkeypatch, env=None):
    for key in list(__import__("os").environ):
        if key.startswith("AGENTGATE_"):
            monkeypatch.delenv(key)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    return settings_from_args(build_parser().parse_args(argv))


def test_the_lora_flags_are_serve_and_engine_flags_and_reach_the_engine(monkeypatch):
    config = _args(["serve"], monkeypatch).engine_config()
    assert (config.lora_modules, config.enable_lora, config.max_loras, config.max_lora_rank) == ((), False, 4, 16)
    assert config.max_cpu_loras is None and config.stored_loras == 4  # --max-cpu-loras defaults to --max-loras
    assert not config.lora_enabled
    for command in ("serve", "engine"):
        argv = [
            command,
            "--lora-modules",
            "a=/x",
            "--lora-modules",
            "b=/y",
            "--max-loras",
            "2",
            "--max-cpu-loras",
            "8",
            "--max-lora-rank",
            "64",
        ]
        config = _args(argv, monkeypatch).engine_config()
        assert (config.lora_modules, config.max_loras, config.max_lora_rank) == (("a=/x", "b=/y"), 2, 64)
        assert config.max_cpu_loras == config.stored_loras == 8
        assert config.lora_enabled
    env = {"AGENTGATE_LORA_MODULES": "a=/x,b=/y", "AGENTGATE_ENABLE_LORA": "1", "AGENTGATE_MAX_CPU_LORAS": "6"}
    config = _args(["serve"], monkeypatch, env).engine_config()
    assert config.lora_modules == ("a=/x", "b=/y") and config.enable_lora and config.stored_loras == 6


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--lora-modules", "nopath"], "NAME=PATH"),
        (["--lora-modules", "a=/x", "--lora-modules", "a=/y"], "twice"),
        (["--lora-modules", "a=/x", "--lora-modules", "b=/y", "--max-loras", "1"], "--max-cpu-loras is 1"),
        (
            ["--lora-modules", "a=/x", "--lora-modules", "b=/y", "--max-loras", "1", "--max-cpu-loras", "1"],
            "2 lora_modules given, --max-cpu-loras is 1",
        ),
        (["--max-loras", "4", "--max-cpu-loras", "2"], "--max-cpu-loras 2 is below --max-loras 4"),
        (["--max-cpu-loras", "0"], "--max-cpu-loras 0 is below --max-loras 4"),
        (["--max-lora-rank", "0"], "max_lora_rank"),
    ],
)
def test_bad_lora_flags_are_refused_naming_them(monkeypatch, argv, match):
    with pytest.raises(ValueError, match=match):
        _args(["serve", *argv], monkeypatch).engine_config()
