"""Schemathesis, a third party's OpenAPI-driven fuzzer, against the local API over real HTTP.

It reads `openapi.json` and sends what it generates from it: valid requests the server must accept, invalid ones it
must refuse, undeclared methods, and stateful sequences following the document's links. Every check is on: server
errors, status code / content type / header / response schema conformance, negative data rejection, positive data
acceptance, unsupported methods, use-after-free, resource availability, and object-level authorization between two
principals (`alice` and `bob`, peers: what one creates the other must not read). A second pass runs as the operator
on the operators' routes.

Schemathesis runs in its own environment, from its own hash-checked lock (`tools/schemathesis.lock`: its pins are
not ours). A failure it reports fails the run unless it is acknowledged in `ACKNOWLEDGED`, each entry with its
reason (schemathesis' baseline file; the reasons are ours).

    python -m tests.acceptance.api_fuzzer --max-time 900     # `make fuzz`: a longer campaign
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sitedispatch.client import IDENTITY_HEADER
from sitedispatch.local.supervisor import LocalRuntime

ROOT = Path(__file__).resolve().parents[2]
SCHEMATHESIS = ROOT / ".venv-schemathesis" / "bin" / "schemathesis"
DOCUMENT = ROOT / "openapi.json"
ACKNOWLEDGED = Path(__file__).resolve().parent / "api-fuzzer-acknowledged.json"
PEERS = ("alice", "bob")
OPERATOR = "operator"
OPERATOR_PATHS = ("/quotas", "/reconcile")
SEED = 7
REQUEST_TIMEOUT_S = 25  # a long poll (`/wait`) holds a request up to 20 s by design


@dataclass(frozen=True)
class Pass:
    name: str
    returncode: int
    output: str


def _auth_file(workdir: Path) -> Path:
    """The two peers as a Web Fuzzing Commons auth document (what schemathesis reads identities from)."""
    path = workdir / "auth.json"
    users = [{"name": who, "fixedHeaders": [{"name": IDENTITY_HEADER, "value": who}]} for who in PEERS]
    path.write_text(json.dumps({"auth": users}))
    return path


def _config(workdir: Path) -> Path:
    """The peers' configuration, in a folder of its own (schemathesis reads a schemathesis.toml in its working
    directory by itself: the operator's pass must not)."""
    (workdir / "peers").mkdir(exist_ok=True)
    path = workdir / "peers" / "schemathesis.toml"
    path.write_text(
        f'[auth.wfc]\npath = "{_auth_file(workdir)}"\nuser = "{PEERS[0]}"\npeers = {json.dumps(list(PEERS))}\n'
    )
    return path


def _run(args: list[str], workdir: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    if not SCHEMATHESIS.exists():
        raise SystemExit("schemathesis is not installed: `make schemathesis` (make test and make fuzz do it)")
    return subprocess.run(
        [str(SCHEMATHESIS), *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def fuzz(
    url: str, workdir: Path, *, max_time_s: int, max_examples: int, seed: int = SEED, update: bool = False
) -> list[Pass]:
    """Both passes against the API at `url`; each pass's exit code and output (0: nothing unacknowledged).
    `update`: what they find is added to the acknowledged file (each new entry then needs its reason)."""
    common = [
        *(["--baseline-update"] if update else []),
        "--url",
        url,
        "--checks",
        "all",
        "--seed",
        str(seed),
        "--max-examples",
        str(max_examples),
        "--workers",
        "1",
        "--request-timeout",
        str(REQUEST_TIMEOUT_S),
        "--max-response-time",
        str(REQUEST_TIMEOUT_S),
        "--baseline",
        str(ACKNOWLEDGED),
    ]
    config = _config(workdir)
    passes = []
    producers = _run(
        ["--no-color", "--config-file", str(config), "run", str(DOCUMENT), *common, "--max-time", str(max_time_s)],
        workdir,
        timeout_s=max_time_s * 2 + 120,
    )
    passes.append(Pass("as two principals (peers)", producers.returncode, producers.stdout + producers.stderr))
    operator_time = max(20, max_time_s // 4)
    only_operators = [arg for path in OPERATOR_PATHS for arg in ("--include-path", path)]
    operator = _run(
        [
            "--no-color",
            "run",
            str(DOCUMENT),
            *common,
            *only_operators,
            "--header",
            f"{IDENTITY_HEADER}: {OPERATOR}",
            "--max-time",
            str(operator_time),
        ],
        workdir,
        timeout_s=operator_time * 2 + 120,
    )
    passes.append(Pass("as the operator", operator.returncode, operator.stdout + operator.stderr))
    return passes


def acknowledged_without_reason() -> list[str]:
    """Entries of the acknowledged file that do not say why (each must)."""
    entries = json.loads(ACKNOWLEDGED.read_text())["entries"]
    return [f"{e['operation']} {e['check']}" for e in entries if len(str(e.get("reason", ""))) < 40]


def campaign(
    workdir: Path, *, max_time_s: int, max_examples: int, seed: int = SEED, update: bool = False
) -> list[Pass]:
    """The local runtime (cloud, API, a worker per lane) started, fuzzed, and stopped."""
    with LocalRuntime(workdir / "runtime") as runtime:
        runtime.start_cloud(0)
        url = runtime.start_api()
        runtime.start_workers([(lane, 1, None, None, None) for lane in ("operations", "bulk", "publications")])
        return fuzz(url, workdir, max_time_s=max_time_s, max_examples=max_examples, seed=seed, update=update)


def main() -> None:
    parser = argparse.ArgumentParser(description="schemathesis against the local API (make fuzz)")
    parser.add_argument("--max-time", type=int, default=900, help="seconds for the principals' pass")
    parser.add_argument("--max-examples", type=int, default=200, help="cases per operation and phase")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--update", action="store_true", help="add what is found to the acknowledged file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        passes = campaign(
            Path(tmp), max_time_s=args.max_time, max_examples=args.max_examples, seed=args.seed, update=args.update
        )
    for result in passes:
        print(f"== schemathesis {result.name}: exit {result.returncode}")
        print(result.output[-20_000:])
    sys.exit(0 if all(result.returncode == 0 for result in passes) else 1)


if __name__ == "__main__":
    main()
