"""One deployment of the stack's template into the local cloud, and what the local runtime reads of it.

moto's CloudFormation creates the stack (local/template.py says what it deploys); the functions' environments,
timeouts, memory and roles are read back from moto's Lambda (resolved by moto from the template), the event source
mappings, schedules and routes from the template itself. Each function gets credentials of its own role (moto's STS
AssumeRole), so that, with the local cloud's IAM enforcement (local/iam.py), every call it makes is authorized
against the policies the template gives that role.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sitedispatch.domain.errors import NotConfigured
from sitedispatch.domain.resources import FUNCTIONS, QUEUES, FunctionSpec
from sitedispatch.local.template import (
    EVENT_SOURCE,
    LOCAL_API_ID,
    ROUTE,
    SCHEDULE,
    cdk_path,
    for_moto,
    resources_of,
)

DEPLOYMENT_FILE_NAME = "deployment.json"  # beside a local cloud's env file: what its runtime's processes read
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# The managed policies the stack exports for the API's callers, by the kind of caller they are for
CALLER_POLICY_OUTPUTS = {"producer": "ProducerPolicyArn", "operator": "OperatorPolicyArn", "reader": "ReaderPolicyArn"}
RATE_UNITS = {"second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400}


@dataclass(frozen=True)
class LocalFunction:
    """A deployed function as its role (FunctionSpec.role) runs locally."""

    role: str
    name: str
    handler: str
    timeout_s: int
    memory_mb: int
    role_arn: str
    environment: dict[str, str]
    credentials: dict[str, str] = field(default_factory=dict)  # its role's, from STS

    def spec(self) -> FunctionSpec:
        """The function's spec with what the template deployed: its timeout, memory and handler."""
        base = FUNCTIONS[self.role]
        return FunctionSpec(base.role, base.logical_id, self.handler, self.timeout_s, self.memory_mb, base.batch_size)


@dataclass(frozen=True)
class EventSource:
    """An event source mapping: which function consumes which queue, and how."""

    queue: str  # QueueSpec.role
    function: str  # FunctionSpec.role
    batch_size: int
    max_concurrency: int
    batching_window_s: int
    report_batch_item_failures: bool


@dataclass(frozen=True)
class LocalSchedule:
    name: str
    rate_s: int
    function: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    authorization: str


@dataclass
class Deployment:
    stack_name: str
    region: str
    functions: dict[str, LocalFunction]
    event_sources: dict[str, EventSource]
    schedules: dict[str, LocalSchedule]
    routes: list[Route]
    outputs: dict[str, str]
    caller_policies: dict[str, str] = field(default_factory=dict)  # producer/operator/reader -> policy document

    def may_invoke(self, kind: str, method: str, path: str) -> bool:
        """Whether the exported managed policy of a `kind` of caller allows `execute-api:Invoke` on this request,
        as API Gateway's IAM authorization judges it (moto's evaluation of identity policies)."""
        from moto.iam.access_control import IAMPolicy, PermissionResult

        from sitedispatch.local.iam import patch_moto_arn_matching

        patch_moto_arn_matching()

        account = self.outputs.get("ProducerPolicyArn", "::::").split(":")[4]
        resource = f"arn:aws:execute-api:{self.region}:{account}:{LOCAL_API_ID}/$default/{method}{path}"
        document = self.caller_policies.get(kind)
        if document is None:
            return False
        return bool(
            IAMPolicy(document).is_action_permitted("execute-api:Invoke", resource) == PermissionResult.PERMITTED
        )

    def environment(self) -> dict[str, str]:
        """The variables the template gives the functions (every function gets the same ones)."""
        return dict(self.functions["api"].environment)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))
        scratch.replace(path)

    @classmethod
    def read(cls, path: Path) -> Deployment:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            raise NotConfigured(
                f"no local deployment at {path}: start the local cloud first (`sitedispatch local cloud`)"
            ) from None
        return cls(
            raw["stack_name"],
            raw["region"],
            {k: LocalFunction(**v) for k, v in raw["functions"].items()},
            {k: EventSource(**v) for k, v in raw["event_sources"].items()},
            {k: LocalSchedule(**v) for k, v in raw["schedules"].items()},
            [Route(**r) for r in raw["routes"]],
            raw["outputs"],
            raw.get("caller_policies", {}),
        )


def _roles_by_path(template: dict[str, Any], kind: str, group: str, roles: dict[str, str]) -> dict[str, str]:
    """Logical id -> role, for each resource of `kind` whose construct under `group` is one of `roles` (construct
    id -> role): `SiteDispatch/Functions/Api/Resource` is the function `api`."""
    found = {}
    for logical, resource in resources_of(template, kind).items():
        parts = cdk_path(resource).split("/")  # [Stage/]Stack/Group/Construct/Resource
        if len(parts) >= 4 and parts[-3] == group and parts[-2] in roles:
            found[logical] = roles[parts[-2]]
    return found


def function_roles(template: dict[str, Any]) -> dict[str, str]:
    """Each function's logical id -> its FunctionSpec role."""
    by_construct = {spec.logical_id: role for role, spec in FUNCTIONS.items()}
    return _roles_by_path(template, "AWS::Lambda::Function", "Functions", by_construct)


def queue_roles(template: dict[str, Any]) -> dict[str, str]:
    """Each consumed queue's logical id -> its QueueSpec role."""
    by_construct = {spec.logical_id: role for role, spec in QUEUES.items()}
    return _roles_by_path(template, "AWS::SQS::Queue", "Queues", by_construct)


def event_sources(template: dict[str, Any]) -> dict[str, EventSource]:
    functions, queues = function_roles(template), queue_roles(template)
    found = {}
    for resource in resources_of(template, EVENT_SOURCE).values():
        props = resource["Properties"]
        queue = queues[props["EventSourceArn"]["Fn::GetAtt"][0]]
        found[queue] = EventSource(
            queue=queue,
            function=functions[props["FunctionName"]["Ref"]],
            batch_size=int(props.get("BatchSize", 10)),
            max_concurrency=int(props.get("ScalingConfig", {}).get("MaximumConcurrency", 1000)),
            batching_window_s=int(props.get("MaximumBatchingWindowInSeconds", 0)),
            report_batch_item_failures="ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
        )
    return found


def rate_seconds(expression: str) -> int:
    """`rate(5 minutes)` -> 300 (the schedule expressions the stack uses)."""
    matched = re.fullmatch(r"rate\((\d+) (\w+)\)", expression)
    if not matched or matched.group(2) not in RATE_UNITS:
        raise NotConfigured(f"the local scheduler runs rate() schedules only, not {expression!r}")
    return int(matched.group(1)) * RATE_UNITS[matched.group(2)]


def schedules(template: dict[str, Any]) -> dict[str, LocalSchedule]:
    functions = function_roles(template)
    found = {}
    for resource in resources_of(template, SCHEDULE).values():
        props = resource["Properties"]
        target = props["Target"]
        payload = json.loads(target.get("Input", "{}"))
        name = str(payload.get("schedule", ""))
        found[name] = LocalSchedule(
            name, rate_seconds(props["ScheduleExpression"]), functions[target["Arn"]["Fn::GetAtt"][0]], payload
        )
    return found


def routes(template: dict[str, Any]) -> list[Route]:
    found = []
    for resource in resources_of(template, ROUTE).values():
        props = resource["Properties"]
        method, path = props["RouteKey"].split(" ", 1)
        found.append(Route(method, path, props.get("AuthorizationType", "NONE")))
    return sorted(found, key=lambda r: (r.path, r.method))


_admin_clients: dict[tuple[int, str, str], Any] = {}


def admin_client(session: Any, service: str, endpoint: str) -> Any:
    """One client per session, service and endpoint: a test run deploys a stack per test, and building a client
    costs more than most of the calls it makes."""
    key = (id(session), service, endpoint)
    if key not in _admin_clients:
        _admin_clients[key] = session.client(service, endpoint_url=endpoint)
    return _admin_clients[key]


def deploy(session: Any, endpoint: str, template: dict[str, Any], stack_name: str) -> Deployment:
    """Create the stack in the emulator at `endpoint` as the account's administrator (`session`), read back what
    the local runtime needs, and give each function its role's credentials."""
    from sitedispatch.local.moto_patches import patch_moto_cloudformation

    patch_moto_cloudformation()  # in this process's moto (tests); the local cloud's process patches its own
    cloudformation = admin_client(session, "cloudformation", endpoint)
    cloudformation.create_stack(
        StackName=stack_name, TemplateBody=json.dumps(for_moto(template)), Capabilities=["CAPABILITY_IAM"]
    )
    [stack] = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    if stack["StackStatus"] != "CREATE_COMPLETE":
        raise NotConfigured(f"the local cloud could not create {stack_name}: {stack.get('StackStatusReason')}")
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cloudformation.list_stack_resources(StackName=stack_name)["StackResourceSummaries"]
    }
    lambda_ = admin_client(session, "lambda", endpoint)
    sts = admin_client(session, "sts", endpoint)
    functions = {}
    for logical, role in function_roles(template).items():
        config = lambda_.get_function_configuration(FunctionName=physical[logical])
        granted = sts.assume_role(RoleArn=config["Role"], RoleSessionName=f"{role}-local")["Credentials"]
        functions[role] = LocalFunction(
            role=role,
            name=config["FunctionName"],
            handler=config["Handler"],
            timeout_s=int(config["Timeout"]),
            memory_mb=int(config["MemorySize"]),
            role_arn=config["Role"],
            environment=dict(config.get("Environment", {}).get("Variables", {})),
            credentials=dict(
                zip(
                    CREDENTIAL_VARIABLES,
                    (granted["AccessKeyId"], granted["SecretAccessKey"], granted["SessionToken"]),
                    strict=True,
                )
            ),
        )
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    iam = admin_client(session, "iam", endpoint)
    policies = {}
    for kind, output in CALLER_POLICY_OUTPUTS.items():
        policy = iam.get_policy(PolicyArn=outputs[output])["Policy"]
        version = iam.get_policy_version(PolicyArn=outputs[output], VersionId=policy["DefaultVersionId"])
        document = version["PolicyVersion"]["Document"]
        policies[kind] = document if isinstance(document, str) else json.dumps(document)
    return Deployment(
        stack_name,
        session.region_name,
        functions,
        event_sources(template),
        schedules(template),
        routes(template),
        outputs,
        policies,
    )


# Where a local runtime's process finds its deployment (written by `local cloud`, named in its env file)
DEPLOYMENT_ENV = "SITEDISPATCH_LOCAL_DEPLOYMENT"


def current_deployment() -> Deployment | None:
    """The deployment this process's local cloud made, if it runs in one (`local up`, the demo, a test's runtime)."""
    import os

    path = os.environ.get(DEPLOYMENT_ENV)
    if not path:
        return None
    try:
        changed = Path(path).stat().st_mtime_ns
    except OSError:
        changed = 0
    return _read_once(path, changed)


@functools.lru_cache(maxsize=4)
def _read_once(path: str, changed: int) -> Deployment:
    """A deployment file read once while it is unchanged (a gateway asks at every request)."""
    return Deployment.read(Path(path))


def act_as(role: str) -> LocalFunction | None:
    """Make this process the deployed function `role`: its role's credentials in the environment, so every client
    it builds from now on is authorized as that role. None outside a local deployment (in-process tests)."""
    import os

    deployment = current_deployment()
    if deployment is None:
        return None
    function = deployment.functions[role]
    os.environ.update(function.credentials)
    return function
