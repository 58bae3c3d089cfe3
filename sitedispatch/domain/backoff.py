"""Retry delays: exponential backoff with full jitter (base 2 s, cap 15 min by default)."""

from __future__ import annotations

import random


def backoff_ceiling(attempt: int, base_s: float, cap_s: float) -> float:
    """The largest delay after failed attempt number `attempt` (1-based)."""
    return min(cap_s, base_s * 2 ** max(0, attempt - 1))


def full_jitter(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """A delay drawn uniformly from [0, ceiling]: retries of many operations spread out instead of colliding."""
    return rng.uniform(0.0, backoff_ceiling(attempt, base_s, cap_s))
