"""Operator and producer controls on accepted work, authorized and audited in one place (access.py): the API calls
nothing else for a read or an action. Each idea is its own module; `Controls` is all of them."""

from __future__ import annotations

from sitedispatch.operator.actions import Actions
from sitedispatch.operator.dependencies import Dependencies
from sitedispatch.operator.quotas import Quotas
from sitedispatch.operator.redrive import Redrives


class Controls(Redrives, Actions, Quotas, Dependencies):
    """Reads, cancel and pause, redrive and replay, quotas, dependencies: every control a caller has, each checked
    by `Access`."""
