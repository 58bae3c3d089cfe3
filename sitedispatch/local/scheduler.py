"""`sitedispatch local scheduler`: EventBridge Scheduler's part locally — fire each schedule at its rate."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

from sitedispatch.domain.resources import FUNCTIONS, SCHEDULES
from sitedispatch.local.esm import LambdaContext, load_handler


def run_scheduler(region: str, rate_scale: float = 1.0, once: bool = False) -> int:
    """Invoke the schedule's function with {"schedule": name} every rate (scaled); stop on SIGTERM/SIGINT."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    next_due = {name: time.time() + spec.rate_s * rate_scale for name, spec in SCHEDULES.items()}
    if once:
        next_due = dict.fromkeys(SCHEDULES, 0.0)
    print(json.dumps({"ready": True, "schedules": list(SCHEDULES)}), flush=True)
    while not stop.is_set():
        now = time.time()
        for name, due in sorted(next_due.items(), key=lambda item: item[1]):
            if due > now:
                continue
            spec = SCHEDULES[name]
            function = FUNCTIONS[spec.function]
            context = LambdaContext(function.logical_id, function.timeout_s, function.memory_mb, region, now)
            try:
                result: Any = load_handler(function.handler)({"schedule": name}, context)
                print(json.dumps({"schedule": name, "result": result}), flush=True)
            except Exception as exc:
                print(json.dumps({"level": "ERROR", "schedule": name, "error": repr(exc)}), flush=True)
            next_due[name] = now + spec.rate_s * rate_scale
        if once:
            return 0
        stop.wait(max(0.05, min(next_due.values()) - time.time()))
    return 0
