"""IAM enforced in the local cloud: every call a function makes is judged against the policies of its role.

moto can authorize requests (INITIAL_NO_AUTH_ACTION_COUNT), but then for every caller at once, and for DynamoDB,
EventBridge and Secrets Manager only by action (its resource is always `*`). Here:
- a request signed with credentials of an assumed role (moto's STS issues `ASIA...` keys: the functions' roles, see
  local/deployment.py) is authorized against that role's policies, by moto's own evaluation of identity policies;
- its resources are the ones AWS authorizes: the table or `table/NAME/index/INDEX` of a query, each table of a
  batch, each item of a transaction by its own action (Put -> PutItem, ...), each event's bus, the secret's ARN;
  the queue and the object as moto computes them;
- anything else (the keys the local cloud, the harness and a test use: `testing`) acts as the account's
  administrator, as whoever deployed the stack does.
Every judged call is recorded (role, action, resource, allowed) for the least-privilege report (local/iam_report.py).
What this leaves out (resource policies, condition keys, KMS) is in docs/aws-semantics.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ASSUMED_ROLE_KEY_PREFIX = "ASIA"
IAM_CALLS_FILE_NAME = "iam-calls.json"  # beside a local cloud's env file: every call judged so far
# Where a stopped local runtime leaves its deployment and judged calls for the IAM report (make test sets it)
IAM_CALLS_DIR_ENV = "SITEDISPATCH_IAM_CALLS_DIR"
# The error code each JSON-protocol service answers a denied call with
JSON_PROTOCOL_ERRORS = {
    "dynamodb": "AccessDeniedException",
    "events": "AccessDeniedException",
    "secretsmanager": "AccessDeniedException",
    "sqs": "AccessDenied",
}
SQS_BATCH_ACTIONS = {
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


class CallLog:
    """The distinct (role, action, resource, allowed) judged so far, written to a file when asked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: set[tuple[str, str, str, bool]] = set()
        self._expecting = 0

    def add(self, role: str, action: str, resource: str, allowed: bool) -> None:
        with self._lock:
            if allowed or not self._expecting:
                self._calls.add((role, action, resource, allowed))

    @contextlib.contextmanager
    def denials_expected(self) -> Iterator[None]:
        """While inside, a denied call is one a test makes on purpose (to see it refused): not the record's."""
        with self._lock:
            self._expecting += 1
        try:
            yield
        finally:
            with self._lock:
                self._expecting -= 1

    def calls(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"role": r, "action": a, "resource": res, "allowed": ok} for r, a, res, ok in sorted(self._calls)]

    def denied(self) -> list[dict[str, Any]]:
        return [call for call in self.calls() if not call["allowed"]]

    def write(self, path: Path) -> None:
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.calls(), indent=1))
        scratch.replace(path)


CALLS = CallLog()


def access_key_of(headers: Any) -> str:
    authorization = headers.get("Authorization", "") or ""
    if "Credential=" not in authorization:
        return ""
    return str(authorization.split("Credential=", 1)[1].split("/", 1)[0])


def requested(handler: Any, action: str, resource: str) -> list[tuple[str, str]]:
    """The (action, resource) pairs AWS authorizes for this request (`action` as `service:Name`)."""
    service = action.split(":", 1)[0]
    account, region = handler.current_account, handler.region
    if service == "dynamodb":
        return _dynamodb(action, _json_body(handler), account, region)
    if action in SQS_BATCH_ACTIONS:  # AWS authorizes a batch by its single action; moto by the API's name
        return [(SQS_BATCH_ACTIONS[action], resource)]
    if service == "events" and action == "events:PutEvents":
        buses = {entry.get("EventBusName") or "default" for entry in _json_body(handler).get("Entries", [])}
        return [(action, _bus_arn(bus, account, region)) for bus in sorted(buses)]
    if service == "secretsmanager":
        body = _json_body(handler)
        secret = str(body.get("SecretId") or body.get("Name") or "*")
        return [(action, _secret_arn(handler, secret, account, region))]
    return [(action, resource)]


def _json_body(handler: Any) -> dict[str, Any]:
    body = handler.body
    if isinstance(body, (str, bytes, bytearray)):
        try:
            body = json.loads(body or "{}")
        except ValueError:
            return {}
    return body if isinstance(body, dict) else {}


def _table_arn(table: str, account: str, region: str) -> str:
    return table if table.startswith("arn:") else f"arn:aws:dynamodb:{region}:{account}:table/{table}"


def _dynamodb(action: str, body: dict[str, Any], account: str, region: str) -> list[tuple[str, str]]:
    name = action.split(":", 1)[1]
    if name in ("BatchGetItem", "BatchWriteItem"):
        return [(action, _table_arn(t, account, region)) for t in sorted(body.get("RequestItems", {}))]
    if name in ("TransactWriteItems", "TransactGetItems"):
        pairs = []
        for item in body.get("TransactItems", []):
            for kind, request in item.items():
                pairs.append((f"dynamodb:{TRANSACT_ACTIONS[kind]}", _table_arn(request["TableName"], account, region)))
        return sorted(set(pairs))
    table = body.get("TableName")
    if not table:
        return [(action, "*")]
    arn = _table_arn(str(table), account, region)
    index = body.get("IndexName")
    return [(action, f"{arn}/index/{index}" if index else arn)]


def _bus_arn(bus: str, account: str, region: str) -> str:
    return bus if bus.startswith("arn:") else f"arn:aws:events:{region}:{account}:event-bus/{bus}"


def _secret_arn(handler: Any, secret: str, account: str, region: str) -> str:
    if secret.startswith("arn:"):
        return secret
    from moto.secretsmanager.models import secretsmanager_backends

    stored = secretsmanager_backends[account][region].secrets.get(secret)
    return str(stored.arn) if stored is not None else f"arn:aws:secretsmanager:{region}:{account}:secret:{secret}"


def _role_of(request: Any) -> str:
    """The role an assumed-role request acts as (its name, the part of the ARN before the session)."""
    arn = str(request._access_key.arn)
    return arn.split(":assumed-role/", 1)[1].split("/", 1)[0] if ":assumed-role/" in arn else arn


def patch_moto_arn_matching() -> None:
    """moto matches a policy's Action and Resource as regular expressions with `*` made `.*`: `$default` in an API
    route's ARN never matches and `.` matches any character. As IAM does: `*` any run of characters, `?` one, every
    other character itself."""
    import re

    from moto.iam.access_control import IAMPolicyStatement

    if getattr(IAMPolicyStatement._match, "literal", False):
        return

    @functools.lru_cache(maxsize=4096)
    def compiled(pattern: str) -> re.Pattern[str]:
        return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern))

    def match(pattern: str, string: str) -> re.Match[str] | None:
        return compiled(pattern).fullmatch(string)

    match.literal = True  # type: ignore[attr-defined]
    IAMPolicyStatement._match = staticmethod(match)  # type: ignore[method-assign]


DECISIONS_KEPT = 500_000


def _permitted(request: Any, action: str, resource: str) -> bool:
    request._action = action
    try:
        request.check_action_permitted(resource)
    except Exception:  # moto's refusal, of whichever service's kind
        return False
    return True


def _refuse(request: Any, action: str, resource: str) -> None:
    """Answer a denied call as its service does: the JSON protocols' error, or moto's own (S3's XML)."""
    service = action.split(":", 1)[0]
    if service in JSON_PROTOCOL_ERRORS:
        from moto.core.exceptions import JsonRESTError

        message = f"User: {request._access_key.arn} is not authorized to perform: {action} on resource: {resource}"
        raise JsonRESTError(JSON_PROTOCOL_ERRORS[service], message)
    request._action = action
    request.check_action_permitted(resource)  # raises moto's refusal


def patch_moto_iam_enforcement(log: CallLog = CALLS) -> None:
    """Authorize every request signed by an assumed role against its role's policies (the module's docstring)."""
    from moto.core.authorization import ActionAuthenticatorMixin

    patch_moto_arn_matching()
    if getattr(ActionAuthenticatorMixin._authenticate_and_authorize_action, "enforced", False):
        return

    # Each (key, action, resource) is judged once: policies do not change while a stack lives (a test that edits
    # one deploys another stack, with other roles and keys), and judging builds moto's request (which looks the key
    # up among every role session of the run) and evaluates every statement.
    decisions: dict[tuple[str, str, str], bool] = {}
    roles: dict[str, str] = {}

    def authorize(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        key = access_key_of(self.headers)
        if not key.startswith(ASSUMED_ROLE_KEY_PREFIX):
            return  # the account's administrator
        service = self.headers["Authorization"].split("Credential=", 1)[1].split("/")[3]
        built: list[Any] = []

        def request() -> Any:  # moto's, built once, only when a judgement is not known yet
            if not built:
                from urllib.parse import urlparse

                parsed = urlparse(self.uri)
                built.append(
                    iam_request_cls(
                        account_id=self.current_account,
                        method=self.method,
                        path=self.raw_path + (f"?{parsed.query}" if parsed.query else ""),
                        data=self.data,
                        body=self.raw_body,
                        headers=self.headers,
                        action=self._get_action(),
                    )
                )
                roles[key] = _role_of(built[0])
            return built[0]

        for action, judged in requested(self, f"{service}:{self._get_action()}", resource):
            allowed = decisions.get((key, action, judged))
            if allowed is None:
                if len(decisions) > DECISIONS_KEPT:
                    decisions.clear()
                allowed = decisions[(key, action, judged)] = _permitted(request(), action, judged)
            log.add(roles.get(key) or _role_of(request()), action, judged, allowed)
            if not allowed:
                _refuse(request(), action, judged)

    authorize.enforced = True  # type: ignore[attr-defined]
    ActionAuthenticatorMixin._authenticate_and_authorize_action = authorize  # type: ignore[method-assign]
