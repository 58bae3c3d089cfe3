"""The stack's synthesized template, as the local cloud deploys it.

`cdk deploy` creates the stack from the template `app.py` synthesizes; the local cloud deploys that same template
into moto: moto's CloudFormation creates what it supports (queues with their attributes and redrive policies, tables
with their keys, indexes and TTL, the bucket, the event bus, the functions with their environments, roles and
policies), and the local runtime reads from the template what moto does not run: the event source mappings (the
local pollers), the schedules (the local scheduler) and the HTTP API's routes (the local gateway). Alarms, the
dashboard, queue and bucket policies and Lambda permissions are not deployed locally (nothing local reads them;
docs/aws-semantics.md says what that leaves untested).

Synthesis costs seconds (a Node process): a template is cached under `.cache/templates/` by the digest of its
inputs (the stack's and the package's sources, the context), so a test run, the demo and `local up` pay it once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sitedispatch.domain.errors import NotConfigured
from sitedispatch.domain.resources import FUNCTION_TIMEOUT_CONTEXT, LOCAL_CODE_CONTEXT

# The checkout the template is synthesized from: where the command runs (as `make` and the CDK CLI run), or this
CHECKOUT_ENV = "SITEDISPATCH_CHECKOUT"
STACK_NAME = "SiteDispatch"  # cdk.json's stack_name
LOCAL_API_ID = "local"  # the HTTP API's id in the local cloud's policies and outputs
SYNTH_TIMEOUT_S = 300

# Read from the template by the local runtime (moto deploys none of them, or would run them itself)
EVENT_SOURCE = "AWS::Lambda::EventSourceMapping"
SCHEDULE = "AWS::Scheduler::Schedule"
ROUTE = "AWS::ApiGatewayV2::Route"
HTTP_API = "AWS::ApiGatewayV2::Api"
READ_BY_THE_RUNTIME = (
    EVENT_SOURCE,
    SCHEDULE,
    ROUTE,
    HTTP_API,
    "AWS::ApiGatewayV2::Stage",
    "AWS::ApiGatewayV2::Integration",
)
# Not deployed locally: nothing of the local runtime reads them, and moto enforces none of them.
NOT_LOCAL = (
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::Dashboard",
    "AWS::SQS::QueuePolicy",
    "AWS::S3::BucketPolicy",
    "AWS::Lambda::Permission",
)
# A function's code locally: the runtime imports the checkout's modules; moto stores this and never runs it.
PLACEHOLDER_CODE = {"ZipFile": "# the local runtime runs the checkout's code (sitedispatch/local/template.py)\n"}


def local_context(function_timeout_s: int, operators: str, readers: str) -> dict[str, Any]:
    """The CDK context of the local cloud's template: the stack as deployed, with every function's timeout capped
    (a killed worker's message comes back in a test's time), the local identities as operators and readers, and
    the asset unbundled (the local runtime runs the checkout)."""
    return {
        "stack_name": STACK_NAME,
        FUNCTION_TIMEOUT_CONTEXT: function_timeout_s,
        LOCAL_CODE_CONTEXT: True,
        "operators": operators,
        "readers": readers,
        # as the CDK CLI sets it for `cdk deploy`: each resource records its construct path, which the local
        # runtime reads to know which function or queue a resource is
        "aws:cdk:enable-path-metadata": True,
    }


def checkout() -> Path:
    """The checkout holding `app.py` and `stacks/`: $SITEDISPATCH_CHECKOUT, else the working directory or the
    nearest folder above it that holds them (as git finds its repository)."""
    start = Path(os.environ.get(CHECKOUT_ENV) or Path.cwd()).resolve()
    for root in (start, *start.parents):
        if (root / "app.py").is_file() and (root / "stacks").is_dir():
            return root
    raise NotConfigured(
        f"the local cloud deploys the stack's template, synthesized from a checkout: neither {start} nor a folder "
        f"above it has app.py and stacks/. Run this in the sitedispatch checkout (or set {CHECKOUT_ENV})"
    )


def _inputs(root: Path) -> list[Path]:
    files = [root / "app.py", root / "cdk.json"]
    for folder in ("stacks", "sitedispatch"):
        files += sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)
    return files


def inputs_digest(context: dict[str, Any], root: Path) -> str:
    """What the template depends on: the app, the stack, the package it imports (routes, tables, settings) and the
    context."""
    digest = hashlib.sha256(json.dumps(context, sort_keys=True).encode())
    for path in _inputs(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def synthesized(context: dict[str, Any], python: str = sys.executable) -> dict[str, Any]:
    """The template `app.py` synthesizes with `context`, from the cache when its inputs have not changed; processes
    that ask at once (test workers) take a lock, so one synthesizes and the others read its result. Read once per
    process and context (a copy each time: a caller may change it)."""
    key = json.dumps(context, sort_keys=True)
    if key not in _read:
        _read[key] = json.dumps(_synthesized(context, python))
    template: dict[str, Any] = json.loads(_read[key])
    return template


_read: dict[str, str] = {}


# Function timeouts to synthesize along with the one asked for, on its first miss (comma-separated): `make test`
# names the ones its tests use, so a run pays them together, in one process (`stacks/synth.py`: the Node runtime
# starts once; each template is exactly the one `cdk deploy -c ...` would deploy). Unset (the demo, `local up`): the
# one asked for alone.
ALONG_ENV = "SITEDISPATCH_LOCAL_TIMEOUTS"
KEPT_TEMPLATES = 12


def _synthesized(context: dict[str, Any], python: str) -> dict[str, Any]:
    root = checkout()
    templates = root / ".cache" / "templates"
    templates.mkdir(parents=True, exist_ok=True)
    cached = templates / f"{inputs_digest(context, root)}.json"
    with (templates / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cached.is_file():
            timeouts = [int(t) for t in os.environ.get(ALONG_ENV, "").split(",") if t.strip()]
            along = [{**context, FUNCTION_TIMEOUT_CONTEXT: t} for t in timeouts]
            wanted = {inputs_digest(c, root): c for c in [context, *along]}
            _synthesize(
                [(c, templates / f"{d}.json") for d, c in wanted.items() if not (templates / f"{d}.json").is_file()],
                python,
                root,
            )
            kept = sorted(templates.glob("*.json"), key=lambda old: old.stat().st_mtime)
            for old in kept[:-KEPT_TEMPLATES]:  # the newest few
                old.unlink(missing_ok=True)
    template: dict[str, Any] = json.loads(cached.read_text())
    return template


def _synthesize(jobs: list[tuple[dict[str, Any], Path]], python: str, root: Path) -> None:
    """Each (context, template file) of `jobs`, synthesized in one process."""
    with tempfile.TemporaryDirectory(prefix="synth-") as scratch:
        outdirs = [Path(scratch) / str(n) for n in range(len(jobs))]
        env = {
            **os.environ,
            "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "1",
        }
        env.pop("CDK_CONTEXT_JSON", None)  # each job's context is its own, whatever the caller's shell holds
        done = subprocess.run(
            [python, "-m", "stacks.synth", json.dumps([[c, str(o)] for (c, _), o in zip(jobs, outdirs, strict=True)])],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=SYNTH_TIMEOUT_S,
            check=False,
        )
        for (context, into), outdir in zip(jobs, outdirs, strict=True):
            produced = outdir / f"{context['stack_name']}.template.json"
            if done.returncode != 0 or not produced.is_file():
                lines = done.stderr.strip().splitlines() or ["it printed nothing"]
                cause = next((line.strip() for line in lines if "Error" in line or "ERROR" in line), lines[-1])
                raise NotConfigured(
                    f"synthesizing the stack for the local cloud failed: {cause[:300]} (run `make synth`)"
                )
            partial = into.with_suffix(".tmp")
            partial.write_text(produced.read_text())
            partial.replace(into)  # atomic: a half-written template is never read


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {logical: r for logical, r in template["Resources"].items() if r["Type"] == kind}


def cdk_path(resource: dict[str, Any]) -> str:
    """The construct path CDK records for a resource (`SiteDispatch/Functions/Api/Resource`)."""
    return str(resource.get("Metadata", {}).get("aws:cdk:path", ""))


def for_moto(template: dict[str, Any]) -> dict[str, Any]:
    """The template moto's CloudFormation deploys: what the runtime reads itself and what is not local removed,
    references to them replaced by their local values (the HTTP API's id), each function's code a placeholder, the
    bootstrap version check (an SSM parameter of a bootstrapped account) gone."""
    dropped = {
        logical
        for logical, r in template["Resources"].items()
        if r["Type"] in READ_BY_THE_RUNTIME or r["Type"] in NOT_LOCAL
    }
    apis = set(resources_of(template, HTTP_API))
    resources = {}
    for logical, resource in template["Resources"].items():
        if logical in dropped:
            continue
        resource = json.loads(json.dumps(resource))
        depends = resource.pop("DependsOn", [])
        kept = [d for d in ([depends] if isinstance(depends, str) else depends) if d not in dropped]
        if kept:
            resource["DependsOn"] = kept
        if resource["Type"] == "AWS::Lambda::Function":
            resource["Properties"]["Code"] = PLACEHOLDER_CODE
        resources[logical] = _replace_refs(resource, apis, dropped)
    outputs = {
        name: _replace_refs(output, apis, dropped)
        for name, output in template.get("Outputs", {}).items()
        if not _references(output, dropped - apis)
    }
    return {"AWSTemplateFormatVersion": "2010-09-09", "Resources": resources, "Outputs": outputs}


def _references(value: Any, logical_ids: set[str]) -> bool:
    text = json.dumps(value)
    return any(re.search(rf'"{re.escape(logical)}"', text) for logical in logical_ids)


def _replace_refs(value: Any, apis: set[str], dropped: set[str]) -> Any:
    """Ref of the HTTP API -> its local id; a reference to anything else dropped is a template error locally."""
    if isinstance(value, dict):
        if set(value) == {"Ref"} and value["Ref"] in apis:
            return LOCAL_API_ID
        if set(value) == {"Fn::GetAtt"} and value["Fn::GetAtt"][0] in apis:
            return (
                f"https://{LOCAL_API_ID}.execute-api.local" if value["Fn::GetAtt"][1] == "ApiEndpoint" else LOCAL_API_ID
            )
        if set(value) == {"Ref"} and value["Ref"] in dropped:
            raise NotConfigured(f"the local cloud does not deploy {value['Ref']}, which the template refers to")
        return {key: _replace_refs(item, apis, dropped) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_refs(item, apis, dropped) for item in value]
    return value
