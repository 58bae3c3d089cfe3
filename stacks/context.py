"""What CDK context changes in the stack, read in one place (`cdk deploy -c KEY=VALUE`, or the local cloud's
template: local/template.py)."""

from __future__ import annotations

from constructs import Construct

from sitedispatch.domain.resources import FUNCTION_TIMEOUT_CONTEXT, LOCAL_CODE_CONTEXT, FunctionSpec


def function_timeout_s(scope: Construct, spec: FunctionSpec) -> int:
    """The function's timeout; `-c sitedispatch:functionTimeoutS=N` caps it (the local cloud's template)."""
    cap = scope.node.try_get_context(FUNCTION_TIMEOUT_CONTEXT)
    return spec.capped(int(cap) if cap else None)


def local_code(scope: Construct) -> bool:
    """`-c sitedispatch:localCode=true`: the asset unbundled, for a template whose functions run from a checkout."""
    return bool(scope.node.try_get_context(LOCAL_CODE_CONTEXT))
