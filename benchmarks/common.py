"""What every benchmark reports the same way: percentiles, the CPU line, the JSON result file.

* ``percentile`` / ``p50_p99``: ONE definition of a latency percentile for every figure in
  docs/benchmarks.md, numpy's default (linear interpolation between the two nearest ranks);
  ``statistics.median`` agrees with it at 50.
* ``cpu_line``: the processor and the instruction-set flags that decide which kernels run,
  printed first by every benchmark, so a figure always travels with the machine it came from.
* ``add_json_option`` / ``write_json``: ``--json PATH`` writes a script's figures with the CPU
  line, the command and a UTC timestamp.
* ``ROOT``, ``SHARED``, ``DATA``, ``CACHE``: the repository, ../shared (``SBERT_SHARED``), its
  data (``SBERT_DATA_DIR``) and the cache of encoded corpora (gitignored).

No Django, torch or numpy at import: importing this module is cheap.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SBERT_SHARED", ROOT.parent / "shared"))
DATA = Path(os.environ.get("SBERT_DATA_DIR", SHARED / "data"))
CACHE = ROOT / "artifacts" / "bench"

# Flags that decide which kernels run. x86: AVX2/FMA and AVX-512 for float32, VNNI and AMX int8
# for int8, AVX-512 BF16 and AMX BF16 for bfloat16. Arm: NEON (asimd), SVE, bf16 and int8
# matrix multiplies (i8mm). A CPU lists only its own kind; the others are simply absent.
CPU_FLAGS = (
    "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "sve", "bf16", "i8mm",
)  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``: ``numpy.percentile`` with its default
    linear interpolation (for n values sorted ascending, position ``q / 100 * (n - 1)``,
    interpolated between its two neighbours). NaN for no values."""
    import numpy as np  # here: the cold-start child of benchmarks.warm times its own imports

    if len(values) == 0:
        return math.nan
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def p50_p99(values: Sequence[float]) -> tuple[float, float]:
    """``(p50, p99)`` of ``values`` by ``percentile``'s definition."""
    return percentile(values, 50), percentile(values, 99)


def _cpuinfo() -> tuple[str, set[str]]:
    """Model name and flags from /proc/cpuinfo where it exists (Linux: x86 ``model name`` and
    ``flags``, Arm ``Features``), else the platform's own description and no flags."""
    name, flags = "", set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not name:
            name = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return name or platform.processor() or platform.machine() or "unknown CPU", flags


def cpu_line() -> str:
    """``CPU: <model>, <n> cores, flags avx2 fma ...``: the same line on every kind of CPU."""
    name, flags = _cpuinfo()
    present = [flag for flag in CPU_FLAGS if flag in flags]
    return f"CPU: {name}, {os.cpu_count()} cores, flags {' '.join(present) or '(none listed)'}"


def load_average() -> str:
    """The 1-minute load average (``"1.3"``), or ``"n/a"`` where the platform has none: the
    figures of a loaded machine are not comparable, so scripts print it at start and end."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except (AttributeError, OSError):
        return "n/a"


def command_line() -> str:
    """How this benchmark was started: ``python -m benchmarks.<name> <arguments>``."""
    main = sys.modules.get("__main__")
    module = getattr(getattr(main, "__spec__", None), "name", None)
    start = ["python", "-m", module] if module else ["python", sys.argv[0]]
    return " ".join([*start, *sys.argv[1:]])


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json PATH``: also write the figures there (see ``write_json``)."""
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the figures here as JSON, with the CPU line, command and time",
    )


def write_json(path: Path | None, figures: Any) -> None:
    """Write ``{"cpu", "command", "timestamp", "figures"}`` to ``path`` (nothing when None).

    ``figures`` is what the script printed, as dicts and lists; values JSON cannot hold (paths,
    numpy scalars) are written as text."""
    if path is None:
        return
    record = {
        "cpu": cpu_line(),
        "command": command_line(),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "figures": figures,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=_plain) + "\n", encoding="utf-8")
    print(f"figures written to {path}")


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) else str(value)


@contextmanager
def patched(module: Any, **values: Any) -> Iterator[None]:
    """``module``'s constants set to ``values`` for the block."""
    before = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(module, name, value)
