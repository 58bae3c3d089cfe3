"""`sitedispatch local api`: API Gateway's part, locally. A real HTTP server on 127.0.0.1 turns each request into the
HTTP API's (payload 2.0) event and calls the deployed function's handler (`FUNCTIONS["api"].handler`) in this process.

Where API Gateway verifies the SigV4 signature and puts the caller's IAM ARN into `requestContext.authorizer.iam`,
this gateway takes the caller's name from the `X-Sitedispatch-As` header (the CLI's `--as`): the one thing it does
not emulate is the signature check, so it listens on 127.0.0.1 only. The function never reads that header; on AWS a
request carrying it is just a signed request with an extra header.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sitedispatch.client import IDENTITY_HEADER
from sitedispatch.domain.errors import Forbidden, SiteDispatchError, TooLarge, error_document, http_status
from sitedispatch.domain.resources import API_URL_VARIABLE, FUNCTIONS, LOCAL_API_ENVIRONMENTS
from sitedispatch.http_handler import NoDelayHandler

MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway HTTP APIs refuse bodies over 10 MB before any function runs
LOCAL_ACCOUNT = "123456789012"

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
Invoke = Callable[[dict[str, Any]], dict[str, Any]]
WARM_HOLD_S = 0.3  # a warming request holds its environment this long, so the next one starts another


def _context(timeout_s: float) -> Any:
    from sitedispatch.local.esm import LambdaContext

    return LambdaContext("Api", timeout_s, 512, os.environ.get("AWS_DEFAULT_REGION", "us-east-1"), time.time())


def serialized(handler: Handler, timeout_s: float) -> Invoke:
    """One execution environment in this process: requests run one at a time (Powertools' resolver holds the
    current request on its class, so two at once in one process would read each other's)."""
    lock = threading.Lock()

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        with lock:
            return handler(event, _context(timeout_s))

    return invoke


@lru_cache(maxsize=1)
def api_handler() -> Handler:
    """The API function's handler, found as Lambda finds it: by the handler named in the table of functions."""
    from sitedispatch.local.esm import load_handler

    return load_handler(FUNCTIONS["api"].handler)


def _invoke_in_environment(event: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    return api_handler()(event, _context(timeout_s))


WARM_UP_CALLER = "local-warm-up"


def _warm_environment(hold_s: float) -> int:
    """The function's init phase in this environment (its imports, clients and core), then what its first requests
    would build on their way (one read through the clients, the routes' validation, by two requests refused before
    the core), and hold it a moment."""
    from sitedispatch.functions.runtime import dependencies

    handler = api_handler()
    dependencies().warm()
    for method, target, body in (("GET", "/nowhere", b""), ("POST", "/operations", b'{"site_id": "-"}')):
        handler(http_api_event(method, target, {"content-type": "application/json"}, body, WARM_UP_CALLER), _context(5))
    time.sleep(hold_s)
    return os.getpid()


@contextmanager
def environments(count: int, timeout_s: float, warm: bool = True) -> Iterator[Invoke]:
    """`count` execution environments, each a process running one request at a time, as Lambda scales a function.
    `warm`: each has run its init phase before the first request (as provisioned concurrency does), so a burst of
    requests meets no cold start; otherwise an environment starts at its first request."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # The function's module is imported once, with Lambda's variables, by the fork server the environments fork
    # from (as a worker host imports before it forks, local/esm.py); each environment builds its own clients and
    # core. Forking the gateway itself is not safe: it runs threads. Ten environments each importing the module
    # took 5.7 s to start on two cores; forked from one that has, 1.4 s.
    os.environ.update(FUNCTIONS["api"].lambda_environment(os.environ.get("AWS_DEFAULT_REGION", "us-east-1")))
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload([FUNCTIONS["api"].handler.rpartition(".")[0], __name__])
    pool = ProcessPoolExecutor(count, mp_context=forkserver)
    try:
        if warm:  # each warming call holds its process, so the pool starts all `count` of them
            list(pool.map(_warm_environment, [WARM_HOLD_S] * count))
        yield lambda event: pool.submit(_invoke_in_environment, event, timeout_s).result()
    finally:
        pool.shutdown(cancel_futures=True)


def http_api_event(
    method: str, target: str, headers: dict[str, str], body: bytes, caller: str | None
) -> dict[str, Any]:
    """The event API Gateway's HTTP API sends a Lambda integration (payload format 2.0)."""
    parts = urlsplit(target)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    text: str | None
    try:
        text, encoded = (body.decode("utf-8"), False) if body else (None, False)
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    now = time.time()
    context: dict[str, Any] = {
        "accountId": LOCAL_ACCOUNT,
        "apiId": "local",
        "domainName": headers.get("host", "127.0.0.1"),
        "http": {
            "method": method,
            "path": parts.path,
            "protocol": "HTTP/1.1",
            "sourceIp": "127.0.0.1",
            "userAgent": headers.get("user-agent", ""),
        },
        "requestId": uuid.uuid4().hex,
        "routeKey": "$default",
        "stage": "$default",
        "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
        "timeEpoch": int(now * 1000),
    }
    if caller:
        context["authorizer"] = {
            "iam": {
                "accessKey": "local",
                "accountId": LOCAL_ACCOUNT,
                "callerId": caller,
                "principalOrgId": None,
                "userArn": caller,
                "userId": caller,
                "cognitoIdentity": None,
            }
        }
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": headers,
        "queryStringParameters": query or None,
        "requestContext": context,
        "body": text,
        "isBase64Encoded": encoded,
    }


def route_table() -> list[tuple[str, re.Pattern[str]]]:
    """The API's routes as API Gateway matches them: the method, and the path with each {parameter} one segment.
    In a local deployment, the routes its template declares; in-process, the ones the API function serves."""
    from sitedispatch.local.deployment import current_deployment

    deployed = current_deployment()
    if deployed is not None:
        declared = [(r.method, r.path) for r in deployed.routes]
    else:
        from sitedispatch.api.app import routes  # the function's module: 0.4 s of imports a deployment spares

        declared = routes()

    def pattern(path: str) -> re.Pattern[str]:
        parts = ("[^/]+" if part.startswith("{") else re.escape(part) for part in path.split("/"))
        return re.compile("/".join(parts))

    return [(method, pattern(path)) for method, path in declared]


def routed(table: list[tuple[str, re.Pattern[str]]], method: str, path: str) -> bool:
    return any(method == m and pattern.fullmatch(path) for m, pattern in table)


# What API Gateway (HTTP API) answers itself for a method and path no route declares, before any authorization.
NO_ROUTE = {"statusCode": 404, "headers": {"Content-Type": "application/json"}, "body": '{"message":"Not Found"}'}


def gateway_refusal(
    table: list[tuple[str, re.Pattern[str]]], method: str, path: str, length: int, headers: dict[str, str]
) -> dict[str, Any] | None:
    """What API Gateway answers itself, in its order: no route, a body over its limit, an unsigned request."""
    if not routed(table, method, path):
        return NO_ROUTE
    if length > MAX_BODY_BYTES:
        return _gateway_error(TooLarge(f"the body is over API Gateway's {MAX_BODY_BYTES} bytes", "body"))
    identity = headers.get(IDENTITY_HEADER.lower())
    if not identity:
        return _gateway_error(
            Forbidden(
                f"locally, name the caller with the {IDENTITY_HEADER} header (the CLI's --as); "
                "on AWS, sign the request with SigV4"
            )
        )
    return caller_refusal(identity, method, path)


@functools.lru_cache(maxsize=1)
def _settings() -> Any:
    """Who is an operator or a reader: the gateway's environment, read once (not at every request)."""
    from sitedispatch.domain.settings import Settings

    return Settings()


def caller_refusal(identity: str, method: str, path: str) -> dict[str, Any] | None:
    """In a local deployment, the caller holds only the managed policy the stack exports for its kind (producer,
    operator or reader): a request it does not allow is refused here, as API Gateway's IAM authorization would."""
    from sitedispatch.local.deployment import current_deployment
    from sitedispatch.operator.access import Caller

    deployed = current_deployment()
    if deployed is None:
        return None
    caller = Caller.of(identity, _settings())
    kind = "reader" if caller.reader else "operator" if caller.operator else "producer"
    if deployed.may_invoke(kind, method, path):
        return None
    return _gateway_error(
        Forbidden(f"{identity} ({kind}) may not invoke {method} {path}: the stack's {kind} policy does not allow it")
    )


def _gateway_error(refusal: SiteDispatchError) -> dict[str, Any]:
    """What API Gateway answers itself (an unsigned request, a body over its limit), in the API's one error body."""
    return {
        "statusCode": http_status(refusal),
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(error_document(refusal)),
    }


class Unbuffered(NoDelayHandler):
    def _reply(self, response: dict[str, Any]) -> None:
        raw = response.get("body") or ""
        payload = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode()
        self.send_response(int(response.get("statusCode", 200)))
        for name, value in (response.get("headers") or {}).items():
            if name.lower() != "content-length":
                self.send_header(name, str(value))
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)


def make_handler(invoke: Invoke) -> type[BaseHTTPRequestHandler]:
    log = sys.stdout  # as it is when the gateway starts (a test's CliRunner swaps sys.stdout later)
    writing = threading.Lock()

    def emit(**line: Any) -> None:
        """One whole line per write, one writer at a time: `print` writes the text and its newline apart, and the
        server's threads interleaved two requests' lines into one."""
        text = json.dumps(line) + "\n"
        with writing:
            log.write(text)
            log.flush()

    table = route_table()

    class Request(Unbuffered):
        protocol_version = "HTTP/1.1"

        def __getattr__(self, name: str) -> Any:
            """Every method (`do_GET`, `do_TRACE`, `do_QUERY`, ...) reaches the route table, as at API Gateway:
            http.server would answer a method it has no `do_` function for with an HTML 501."""
            if name.startswith("do_"):
                return self._serve
            raise AttributeError(name)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            headers = {k.lower(): v for k, v in self.headers.items()}
            refusal = gateway_refusal(table, self.command, urlsplit(self.path).path, length, headers)
            if refusal is not None:
                self._reply(refusal)
                if length > MAX_BODY_BYTES:
                    self.close_connection = True  # its body is never read
                elif length:
                    self.rfile.read(length)
                return
            body = self.rfile.read(length) if length else b""
            event = http_api_event(self.command, self.path, headers, body, headers[IDENTITY_HEADER.lower()])
            try:
                response = invoke(event)
            except Exception as exc:  # an unhandled error in the function: API Gateway answers 500
                emit(level="ERROR", message="function error", error=repr(exc))
                response = _gateway_error(SiteDispatchError("Internal Server Error"))
            self._reply(response)

        def log_message(self, format: str, *args: Any) -> None:  # one JSON line per request, like access logs
            emit(level="INFO", message="request", line=format % args)

    return Request


class Server(ThreadingHTTPServer):
    """http.server's threading server, with the listen backlog a server has (socketserver's is 5): ten connections
    opened at once overflowed it, and the one refused waited for TCP to try again, a second later."""

    request_queue_size = socket.SOMAXCONN


@contextmanager
def running_gateway(invoke: Invoke | None = None, port: int = 0, timeout_s: float = 29.0) -> Iterator[str]:
    """The gateway's HTTP server in a thread of this process; its URL. Stopped on exit. By default the function
    runs in this process, one request at a time (tests)."""
    server = Server(("127.0.0.1", port), make_handler(invoke or serialized(api_handler(), timeout_s)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="local-api", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def add_to_env_file(path: Path, key: str, value: str) -> None:
    from sitedispatch.local.cloud import read_env_file, write_env_file

    env = read_env_file(path) if path.exists() else {}
    env[key] = value
    write_env_file(path, env)


def serve(port: int, env_file: Path | None, count: int = LOCAL_API_ENVIRONMENTS, timeout_s: float = 29.0) -> None:
    """Run the gateway until SIGTERM/SIGINT, the function in `count` environments (processes); prints one JSON line
    {"ready": ..., "url": ...} when it answers, and records the URL in the local runtime's env file (where the CLI
    finds it)."""
    from sitedispatch.local.cloud import check_port_free
    from sitedispatch.local.deployment import act_as

    check_port_free(port)
    act_as("api")  # its environments (forked from here) call AWS as the api function's role
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with environments(count, timeout_s) as invoke, running_gateway(invoke, port=port) as url:
        if env_file:
            add_to_env_file(env_file, API_URL_VARIABLE, url)
        print(json.dumps({"ready": True, "url": url}), flush=True)
        stop.wait()
    sys.stdout.flush()
