"""One synthesis per session (bundling included): the template, the stack and the cloud assembly directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")


@dataclass
class Synthesized:
    template: dict[str, Any]
    stack: Any
    outdir: Path
    seconds: float


def synthesize(outdir: Path, context: dict[str, Any] | None = None, name: str = "SiteDispatchTest") -> Synthesized:
    import time

    import aws_cdk as cdk

    from stacks.dispatch_stack import SiteDispatchStack

    started = time.perf_counter()
    app = cdk.App(outdir=str(outdir), context=context or {})
    stack = SiteDispatchStack(app, name)
    template = app.synth().get_stack_by_name(name).template
    return Synthesized(template, stack, outdir, time.perf_counter() - started)


@pytest.fixture(scope="session")
def synthesized_stack(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def synthesized(synthesized_stack: Synthesized) -> tuple[dict[str, Any], Any]:
    return synthesized_stack.template, synthesized_stack.stack


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}
