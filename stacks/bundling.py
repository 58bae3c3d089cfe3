"""The Lambda asset, bundled without Docker and without the network.

`make lambda-wheels` downloads the hash-pinned wheels of `requirements-lambda.lock` for the Lambda platform (Python
3.13, arm64) into `.cache/lambda-wheels/` once, as setting up `.venv` does. Synthesis then installs them with pip
from that directory only (`--no-index`), adds the entrypoints (`sitedispatch/functions`) and the modules of the core
they import (their import closure: never the local runtime, the CLI or the demo's load generator), compiles
everything to the runtime's bytecode, and caches the result by the hash of its inputs, so repeated synths copy a
directory instead of running pip.

Bytecode, because Lambda's /var/task is read-only: without `__pycache__` in the asset, Python compiles every module
of Powertools, pydantic, pynamodb and this code from source at every cold start and cannot keep the result
(bench/coldstart.py measures it). Bytecode is per Python minor version, so it is compiled by an interpreter of the
runtime's version (LAMBDA_PYTHON, the newest the build machines have). `unchecked-hash` pycs: the asset is
immutable, and a zip does not keep the source mtimes a timestamp pyc is checked against.
"""

from __future__ import annotations

import ast
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements-lambda.lock"
WHEELS = ROOT / ".cache" / "lambda-wheels"
BUNDLES = ROOT / ".cache" / "lambda-bundle"
LAMBDA_PYTHON = "3.13"  # the Makefile's LAMBDA_PYTHON (the wheels it downloads); RUNTIME below
PLATFORM = (
    "--platform",
    "manylinux2014_aarch64",
    "--python-version",
    LAMBDA_PYTHON,
    "--implementation",
    "cp",
    "--only-binary=:all:",
)
RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
CORE = "sitedispatch"
ENTRYPOINTS = ROOT / CORE / "functions"  # the Lambda handlers: what the asset holds starts from them


class BundlingError(RuntimeError):
    pass


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function (deferred imports run on Lambda too), except
    under `if TYPE_CHECKING:` (those never run). Relative imports are not used in this project."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return found


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def import_closure() -> list[Path]:
    """The project's modules the entrypoints can import, following imports (and each module's parent packages)."""
    todo = sorted(ENTRYPOINTS.glob("*.py"))
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported_modules(path):
            parts = name.split(".")
            if parts[0] != CORE:
                continue
            for depth in range(1, len(parts) + 1):  # a module's packages run their __init__ first
                found = _module_file(".".join(parts[:depth]))
                if found is not None and found not in seen:
                    todo.append(found)
    return sorted(seen)


def _package_data(modules: list[Path]) -> list[Path]:
    """Files beside the code that a shipped package reads (templates, the mu-plugin): those in folders without an
    __init__.py whose nearest package is shipped."""
    packages = {m.parent for m in modules if m.name == "__init__.py"}
    data = set()
    for package in packages:
        for path in package.rglob("*"):
            if not path.is_file() or path.suffix == ".py" or "__pycache__" in path.parts:
                continue
            owner = next(parent for parent in path.parents if (parent / "__init__.py").exists())
            if owner == package and owner != path.parent:
                data.add(path)
    return sorted(data)


def _source_files() -> list[Path]:
    """What the asset holds besides the dependencies: exactly the code the functions import, and its data."""
    modules = import_closure()
    return modules + _package_data(modules)


def inputs_digest() -> str:
    """Everything the bundle is made of: the lock and the code (a change to either makes a new bundle)."""
    digest = hashlib.sha256(LOCK.read_bytes())
    digest.update(f"bytecode {LAMBDA_PYTHON} {runtime_interpreter() is not None}".encode())
    for path in _source_files():
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]


@functools.lru_cache(maxsize=1)
def runtime_interpreter() -> str | None:
    """A Python of the Lambda runtime's version on this machine (on PATH, or installed by pyenv), or None."""
    name = f"python{LAMBDA_PYTHON}"
    candidates = [shutil.which(name)]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += [str(p / "bin" / name) for p in sorted(pyenv.glob(f"{LAMBDA_PYTHON}.*"), reverse=True)]
    tag = f"cpython-{LAMBDA_PYTHON.replace('.', '')}"
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.implementation.cache_tag)"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == tag:
            return candidate
    return None


def compile_bytecode(target: Path) -> None:
    """Every module of the asset, compiled for the runtime. Without the interpreter the asset still deploys (and
    its cold starts compile from source): synthesis says so on stderr rather than fail."""
    interpreter = runtime_interpreter()
    if interpreter is None:
        print(
            f"warning: no Python {LAMBDA_PYTHON} on this machine: the Lambda asset ships without bytecode "
            f"(each cold start compiles every module; install python{LAMBDA_PYTHON} to fix)",
            file=sys.stderr,
        )
        return
    # Exit status 1 when a file does not compile: some wheels carry templates or tests written for other Pythons;
    # what the functions import is checked by tests/infrastructure (every shipped module has its bytecode).
    subprocess.run(
        [interpreter, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(target)],
        capture_output=True,
        check=False,
    )


def build_bundle(target: Path) -> None:
    """pip for the Lambda platform, from the local wheelhouse only; then the code."""
    if not WHEELS.is_dir() or not any(WHEELS.glob("*.whl")):
        raise BundlingError(f"no Lambda wheels in {WHEELS}: run `make lambda-wheels` (downloads them once)")
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        str(WHEELS),
        "--require-hashes",
        "--no-deps",
        *PLATFORM,
        "--target",
        str(target),
        "-r",
        str(LOCK),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BundlingError(f"pip could not install the Lambda dependencies:\n{done.stderr[-2000:]}")
    for path in _source_files():
        destination = target / path.relative_to(ROOT)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
    for cache in target.rglob("__pycache__"):  # pip compiled for this machine's Python, not the runtime's
        shutil.rmtree(cache, ignore_errors=True)
    compile_bytecode(target)


def cached_bundle() -> Path:
    """The bundle of the current inputs, built once: processes that synthesize at once (the test workers) take a
    lock around the build, so one builds and the others find its bundle; old bundles go, never one being built."""
    BUNDLES.mkdir(parents=True, exist_ok=True)
    bundle = BUNDLES / inputs_digest()
    with (BUNDLES / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not bundle.is_dir():
            scratch = Path(tempfile.mkdtemp(dir=BUNDLES, prefix="building-"))
            try:
                build_bundle(scratch)
                scratch.rename(bundle)  # atomic: a half-built bundle is never used
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            kept = sorted((old for old in BUNDLES.iterdir() if old.is_dir()), key=lambda old: old.stat().st_mtime)
            for old in kept[:-4]:  # keep the newest few
                if old.name != bundle.name:
                    shutil.rmtree(old, ignore_errors=True)
    return bundle


@jsii.implements(ILocalBundling)
class LocalBundling:
    """CDK's local bundling hook: fill `output_dir` here, so CDK never starts Docker."""

    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        shutil.copytree(cached_bundle(), output_dir, dirs_exist_ok=True)
        return True


def function_code(local: bool = False) -> lambda_.Code:
    """One asset for every function (the handler differs). Its hash is the bundle's content. `local`: the template
    the local cloud deploys, whose functions run from the checkout: the entrypoints' directory as it is, unbundled."""
    if local:
        return lambda_.Code.from_asset(str(ENTRYPOINTS))
    return lambda_.Code.from_asset(
        str(ENTRYPOINTS),  # nominal source (fingerprinted by CDK); the bundle is made from SOURCES
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=inputs_digest(),
        bundling=BundlingOptions(image=DockerImage.from_registry("unused-local-bundling-only"), local=LocalBundling()),
    )
