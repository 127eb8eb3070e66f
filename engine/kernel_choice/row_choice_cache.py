"""What row choice measured at load, remembered between starts (``--cache-dir``, ``--remeasure``).

Row choice (`engine.kernel_choice.row_choice`) measures two things at load: the row
count from which the dense form beats the quantized kernels (the crossover,
timed: a second or two), and how prompt rows of each layer shape run without
depending on their company (`engine.kernel_choice.row_invariance`'s bitwise checks:
about 3 s of the default model's start); `engine.kernel_choice.decode_exactness`
checks decode rows for ``--speculative auto`` likewise. All are remembered in
``row_choice.json`` under the cache directory: ``--cache-dir``, by default
``$XDG_CACHE_HOME/agentgate``, or ``~/.cache/agentgate`` where that variable
is unset or not absolute (the XDG rule), created (mode 0700) by the user who
runs the engine. An entry's key names everything its result depends on: what
was measured, the CPU's name, torch's thread count, torch's version and the
layer shapes; another CPU, thread count, torch or model measures again.

Each entry records when it was measured (``measured_at``, seconds since the
epoch) and how noisy the measurement was (``spread``: for the crossover, the
largest ``(median - fastest) / fastest`` of the repeated timings of either
form at the sizes that decided it; the prompt-row checks compare bits, not
times, and record none). The rule:

- an entry older than `MAX_AGE_S` (30 days) is measured again: what the key
  cannot see (a BIOS or microcode update, a library rebuilt under the same
  version, the machine's usual load) drifts;
- a noisy entry (``spread`` above `NOISY_SPREAD`, 10%: the machine was busy
  while it timed) is used for the start that measured it and measured again
  at the next, up to `NOISY_TRIES` (3) noisy measurements in a row; the last
  one is then kept like a quiet one, since a machine that is always that busy
  would otherwise pay the measurement at every start;
- ``--remeasure`` measures everything again and rewrites the entries;
- an entry or a file that does not parse is measured again.

Writing is best effort: a cache directory that cannot be written only means
measuring again next time.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("agentgate.engine")

FILE_NAME = "row_choice.json"
MAX_AGE_S = 30 * 86400
NOISY_SPREAD = 0.10
NOISY_TRIES = 3


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/agentgate``, or ``~/.cache/agentgate`` where the variable is unset or relative."""
    base = (os.environ if environ is None else environ).get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "agentgate"


def spread(timings: Sequence[float]) -> float:
    """How far a typical repeat is from the fastest: ``(median - fastest) / fastest``."""
    fastest = min(timings)
    return (statistics.median(timings) - fastest) / fastest if fastest > 0 else 0.0


@dataclass(frozen=True)
class Entry:
    """One remembered result (``value``: JSON) and how it was measured (see the module docstring)."""

    value: Any
    measured_at: float
    spread: float = 0.0
    tries: int = 1  # noisy measurements in a row, this one included

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD

    def fresh(self, now: float) -> bool:
        """Still to be used at ``now``: younger than `MAX_AGE_S`, and quiet or past its tries."""
        return 0 <= now - self.measured_at < MAX_AGE_S and (not self.noisy or self.tries >= NOISY_TRIES)


class MeasurementCache:
    """The entries of ``directory``/`FILE_NAME`; ``remeasure``: recall nothing (``--remeasure``);
    ``clock``: seconds since the epoch (tests pass a fake one)."""

    def __init__(
        self, directory: Path | None = None, *, remeasure: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = (directory or default_cache_dir()) / FILE_NAME
        self.remeasure, self.clock = remeasure, clock

    def recall(self, key: str) -> Entry | None:
        """The entry under ``key`` while it is fresh; None: measure it."""
        entry = None if self.remeasure else self._entries().get(key)
        return entry if entry is not None and entry.fresh(self.clock()) else None

    def remember(self, key: str, value: Any, spread: float = 0.0) -> Entry:
        """Record a new measurement under ``key``, counting it as another try where the one it
        replaces was noisy too (and not aged out, nor forced out by ``--remeasure``)."""
        now = self.clock()
        before = None if self.remeasure else self._entries().get(key)
        entry = Entry(value, now, spread)
        if entry.noisy and before is not None and before.noisy and 0 <= now - before.measured_at < MAX_AGE_S:
            entry = Entry(value, now, spread, before.tries + 1)
        self._write(key, entry)
        return entry

    def _entries(self) -> dict[str, Entry]:
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        entries = {}
        for key, fields in raw.items() if isinstance(raw, dict) else ():
            try:
                entry = Entry(**fields)
            except TypeError:  # another version's entry, or not ours: measured again
                continue
            numbers = (entry.measured_at, entry.spread, entry.tries)
            if all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
                entries[key] = entry
        return entries

    def _write(self, key: str, entry: Entry) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            entries = {k: asdict(e) for k, e in self._entries().items()} | {key: asdict(entry)}
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(entries, indent=1))
            temporary.replace(self.path)
        except OSError as exc:
            log.info("batched matmul: measurement not remembered in %s (%s)", self.path, exc)


def cache_key(kind: str, shapes: str) -> str:
    """The key of a ``kind`` of measurement on ``shapes``, on this CPU, thread count and torch."""
    return f"{kind}|{_cpu_name()}|threads={torch.get_num_threads()}|torch={torch.__version__}|{shapes}"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown cpu"
