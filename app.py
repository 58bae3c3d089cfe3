#!/usr/bin/env python3
"""CDK app: synthesizes with no AWS credentials, no network and no git checkout (`make synth`)."""

import os

from stacks.synth import synthesize

# The CDK CLI passes CDK_OUTDIR; `python app.py` alone (make synth) writes cdk.out/ like the CLI would.
synthesize(os.environ.get("CDK_OUTDIR", "cdk.out"))
