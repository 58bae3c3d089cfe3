"""`sitedispatch local scheduler`: EventBridge Scheduler's part locally — fire each schedule at its rate."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

from sitedispatch.domain.resources import FUNCTIONS, SCHEDULES, FunctionSpec
from sitedispatch.local.esm import LambdaContext, load_handler


def run_scheduler(region: str, rate_scale: float = 1.0, once: bool = False) -> int:
    """Invoke the schedule's function with {"schedule": name} every rate (scaled); stop on SIGTERM/SIGINT."""
    from sitedispatch.local.deployment import act_as, current_deployment

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    deployed = current_deployment()
    # (rate, function, input) per schedule: as the template deployed them, else as defined (in-process tests)
    plan: dict[str, tuple[int, FunctionSpec, dict[str, Any]]] = {}
    if deployed is not None:
        for name, schedule in deployed.schedules.items():
            deployed_function = act_as(schedule.function)
            assert deployed_function is not None
            plan[name] = (schedule.rate_s, deployed_function.spec(), schedule.input)
    else:
        plan = {name: (s.rate_s, FUNCTIONS[s.function], {"schedule": name}) for name, s in SCHEDULES.items()}
    next_due = {name: time.time() + rate * rate_scale for name, (rate, _, _) in plan.items()}
    if once:
        next_due = dict.fromkeys(plan, 0.0)
    print(json.dumps({"ready": True, "schedules": list(plan)}), flush=True)
    failed = 0
    while not stop.is_set():
        now = time.time()
        for name, due in sorted(next_due.items(), key=lambda item: item[1]):
            if due > now:
                continue
            rate, function, payload = plan[name]
            context = LambdaContext(function.logical_id, function.timeout_s, function.memory_mb, region, now)
            try:
                result: Any = load_handler(function.handler)(dict(payload), context)
                print(json.dumps({"schedule": name, "result": result}), flush=True)
            except Exception as exc:
                failed += 1
                print(json.dumps({"level": "ERROR", "schedule": name, "error": repr(exc)}), flush=True)
            next_due[name] = now + rate * rate_scale
        if once:  # a run by hand: its exit says whether every schedule's function succeeded
            return 1 if failed else 0
        stop.wait(max(0.05, min(next_due.values()) - time.time()))
    return 0
