"""loadtests/gpu_check.sh on a CPU: its import set-up, its wheel unpacking,
and its failure paths (a failing step, a timed-out step, a step out of
budget, GPU steps without a GPU) all end in one summary and a non-zero exit.
The GPU steps themselves are replaced by stubs (GPU_CHECK_STEPS), except in
the tests of the real step list: on this GPU-less machine as it is, and, with
the lent machine's package set simulated, its failed environment step and
its CPU smoke (GPU_CHECK_SMOKE=1: every step on a tiny model)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from agentgate.loadtests import lent_image

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path):
    """A copy of the repository's layout (the folders linked) with a .whl/
    holding one small wheel, so the script's set-up can be seen at work."""
    root = tmp_path / "repo"
    (root / "loadtests").mkdir(parents=True)
    (root / "loadtests" / "gpu_check.sh").write_text((REPO / "loadtests" / "gpu_check.sh").read_text())
    for part in ("engine", "gateway", "agents"):
        (root / part).symlink_to(REPO / part)
    for item in (REPO / "loadtests").iterdir():
        if item.name != "gpu_check.sh":
            (root / "loadtests" / item.name).symlink_to(item)
    (root / ".whl").mkdir()
    with zipfile.ZipFile(root / ".whl" / "carried-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("carried/__init__.py", "VALUE = 'from the wheel'\n")
        wheel.writestr("carried-1.0.dist-info/METADATA", "Name: carried\nVersion: 1.0\n")
    return root


def run_check(root: Path, tmp_path: Path, steps: str | None, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), **env}
    environ.pop("PYTHONPATH", None)
    if steps is not None:
        (tmp_path / "steps.sh").write_text(steps)
        environ["GPU_CHECK_STEPS"] = str(tmp_path / "steps.sh")
    return subprocess.run(
        ["bash", str(root / "loadtests" / "gpu_check.sh")],
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
    )


def summary(result: subprocess.CompletedProcess) -> dict[str, str]:
    """step name -> status, from the summary table."""
    lines = result.stdout.split("== summary", 1)[1].splitlines()[2:]
    table = {}
    for line in lines:
        if line.startswith(("figures:", "  ", "gpu_check:")):
            break
        name, rest = line.split(None, 1)
        table[name] = rest.rsplit(None, 1)[0].strip()
    return table


def test_imports_come_from_the_checkout_and_the_carried_wheels(checkout, tmp_path):
    # -S: no site-packages, so no installed agentgate: only what the script set up.
    steps = (
        'step imports 60 -- "$py" -S -c "import importlib.util as u, os; '
        "print('FIGURE engine:', os.path.realpath(u.find_spec('agentgate.engine').origin))\"\n"
        'step wheel 60 -- "$py" -S -c "import carried; print(\'FIGURE carried:\', carried.VALUE)"\n'
    )
    result = run_check(checkout, tmp_path, steps)
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary(result) == {"imports": "ok", "wheel": "ok"}
    assert f"engine: {REPO / 'engine' / '__init__.py'}" in result.stdout
    assert "carried: from the wheel" in result.stdout
    assert "1 of 1 carried wheels unpacked" in result.stdout
    assert result.stdout.rstrip().endswith("gpu_check: all steps passed")


def test_every_step_runs_and_any_failure_fails_the_check(checkout, tmp_path):
    steps = (
        "step first 30 -- bash -c 'echo FIGURE first figure: 1.5'\n"
        "step broken 30 -- bash -c 'echo something broke >&2; exit 3'\n"
        "step slow 2 -- sleep 60\n"
        "step after 30 -- bash -c 'echo FIGURE after the failures: ran'\n"
        "gpu_ok=0\n"
        "step on-gpu 30 gpu -- bash -c 'echo must not run; exit 1'\n"
    )
    result = run_check(checkout, tmp_path, steps)
    assert result.returncode == 1
    assert summary(result) == {
        "first": "ok",
        "broken": "failed (exit 3)",
        "slow": "timed out after 2s",
        "after": "ok",
        "on-gpu": "skipped: no CUDA device",
    }
    figures = result.stdout.split("figures:", 1)[1]
    assert "first figure: 1.5" in figures and "after the failures: ran" in figures
    assert "must not run" not in result.stdout
    assert (tmp_path / "out" / "broken.log").read_text().strip() == "something broke"
    assert result.stdout.rstrip().endswith("gpu_check: FAILED")


def test_steps_past_the_time_budget_are_not_run_and_fail_the_check(checkout, tmp_path):
    steps = "step long 60 -- sleep 4\nstep next 60 -- true\n"
    result = run_check(checkout, tmp_path, steps, GPU_CHECK_BUDGET="6")
    assert result.returncode == 1
    assert summary(result) == {"long": "ok", "next": "not run: the time budget is spent"}


@pytest.mark.slow
def test_the_real_steps_on_a_machine_without_a_gpu(checkout, tmp_path):
    """The environment step runs for real and finds no CUDA device; every
    GPU step is then skipped, and the check fails."""
    result = run_check(checkout, tmp_path, None)
    assert result.returncode == 1, result.stdout + result.stderr
    table = summary(result)
    assert table.pop("environment") == "failed (exit 3)"
    assert table and set(table.values()) == {"skipped: no CUDA device"}
    assert "no CUDA device: the GPU steps are skipped" in result.stdout
    assert f"agentgate.engine from {REPO}" in result.stdout


# -- the lent machine's package set, simulated (loadtests/lent_image.py) -----------------------


@pytest.fixture(scope="module")
def lent_python(tmp_path_factory) -> dict[str, str]:
    """Interpreters that see only the lent image's packages: ``bare`` as the image is, ``carried``
    with the wheels gpu_check.sh carries there (here: this machine's own copies of them)."""
    root = tmp_path_factory.mktemp("lent-image")
    return {
        "bare": str(lent_image.simulate(root / "bare")),
        "carried": str(lent_image.simulate(root / "carried", with_carried=True)),
    }


def test_the_simulated_image_lacks_what_the_lent_machine_lacks(lent_python):
    probe = "import importlib.util as u; print(*(u.find_spec(m) is not None for m in {}))"
    wanted = ("torch", "triton", "pytest", "xdist", "uvicorn", "mcp", "gguf", "zmq", "msgspec", "agentgate")
    for image, msgspec in (("bare", "False"), ("carried", "True")):
        found = subprocess.run(
            [lent_python[image], "-c", probe.format(wanted)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert found == ["True"] * 4 + ["False"] * 4 + [msgspec, "False"], image


def test_dummy_weights_load_without_gguf():
    """gguf is imported only where a GGUF file is read (the lent image has none)."""
    script = (
        "import sys; from agentgate.engine.loaders import load_model; "
        f"load_model({str(REPO / 'loadtests/configs/tiny-llama')!r}, load_format='dummy'); "
        "print('gguf' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.split()[-1] == "False"


def test_without_the_carried_wheel_the_gpu_steps_are_skipped_naming_the_cause(checkout, tmp_path, lent_python):
    # The smoke mode would run every step on this CPU: only the failed environment step stops them.
    result = run_check(checkout, tmp_path, None, PYTHON=lent_python["bare"], GPU_CHECK_SMOKE="1")
    assert result.returncode == 1, result.stdout + result.stderr
    table = summary(result)
    assert table.pop("environment") == "failed (exit 2)"
    assert table and set(table.values()) == {"skipped: the environment step failed"}
    assert "MISSING modules: msgspec" in result.stdout and "gpu_wheels.sh" in result.stdout


@pytest.mark.slow
def test_every_default_step_runs_on_the_cpu_on_the_lent_image(tmp_path, lent_python):
    """gpu_check.sh's own step list (GPU_CHECK_SMOKE=1: a tiny model, the GPU tests collected
    and skipped), run with the lent image's packages: an import the image cannot serve, or an API
    change in a benchmark, fails here rather than on the first lent GPU."""
    result = run_check(REPO, tmp_path, None, PYTHON=lent_python["carried"], GPU_CHECK_SMOKE="1")
    assert result.returncode == 0, result.stdout + result.stderr
    table = summary(result)
    assert table == dict.fromkeys(("environment", "gpu-tests", "runner-tiny", "kernels-tiny", "attention"), "ok")
    # The GPU tests were all collected (any import error fails the step) and skipped here.
    collected = (tmp_path / "out" / "gpu-tests.log").read_text()
    assert int(re.search(r"(\d+) skipped", collected).group(1)) > 50 and "error" not in collected
    figures = result.stdout.split("figures:", 1)[1]
    for figure in ("tiny b1: ", "tiny b2: ", "(geomean ", "kernels per layer, tiny: ", "kernels per decode step"):
        assert figure in figures, figure
    attention = re.findall(r"^  (rotary\+kv_write|decode|prefill) .* max \|diff\| (\S+)$", figures, re.M)
    assert sorted({kind for kind, _ in attention}) == ["decode", "prefill", "rotary+kv_write"]
    assert all(float(diff) < 1e-2 for _, diff in attention), attention  # the kernels agree with the references
