"""Where the benchmarks write their figures, and what each results file says about the run that made it."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def meta() -> dict[str, Any]:
    """When and where: the date, the machine, its CPUs and the Python that ran."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
