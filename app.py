#!/usr/bin/env python3
"""CDK app: synthesizes with no AWS credentials, no network and no git checkout (`make synth`)."""

import os

import aws_cdk as cdk

from stacks.dispatch_stack import SiteDispatchStack

# The CDK CLI passes CDK_OUTDIR; `python app.py` alone (make synth) writes cdk.out/ like the CLI would.
app = cdk.App(outdir=os.environ.get("CDK_OUTDIR", "cdk.out"))
SiteDispatchStack(app, app.node.try_get_context("stack_name") or "SiteDispatch")
app.synth()
