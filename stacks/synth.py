"""Synthesizing the stack: `app.py` (the CDK CLI's app) once, and the local cloud's templates several at once.

`python -m stacks.synth JOBS` synthesizes one template per job (a JSON list of `[context, outdir]`) in one process:
the first costs the Node runtime's start (about 10 s), each further one about 1.5 s, against 10 s or more each in a
process of its own. Each job is its own `App`, with exactly the context `cdk deploy -c ...` would give it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import aws_cdk as cdk

from stacks.dispatch_stack import SiteDispatchStack

DEFAULT_STACK_NAME = "SiteDispatch"


def synthesize(outdir: str, context: dict[str, Any] | None = None) -> None:
    """The stack into `outdir`; without `context`, the App reads what the CDK CLI passes (CDK_CONTEXT_JSON)."""
    app = cdk.App(outdir=outdir, context=context)
    SiteDispatchStack(app, app.node.try_get_context("stack_name") or DEFAULT_STACK_NAME)
    app.synth()


if __name__ == "__main__":
    for context, outdir in json.loads(sys.argv[1]):
        synthesize(outdir, context)
