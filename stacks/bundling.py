"""The Lambda asset, bundled without Docker and without the network.

`make lambda-wheels` downloads the hash-pinned wheels of `requirements-lambda.lock` for the Lambda platform (Python
3.14, arm64) into `.cache/lambda-wheels/` once, as setting up `.venv` does. Synthesis then installs them with pip
from that directory only (`--no-index`), adds the `sitedispatch` core (without the local runtime and the CLI, which
Lambda never imports) and the `functions` entrypoints, and caches the result by the hash of its inputs, so repeated
synths copy a directory instead of running pip.
"""

from __future__ import annotations

import hashlib
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
PLATFORM = ("--platform", "manylinux2014_aarch64", "--python-version", "3.14", "--implementation", "cp",
            "--only-binary=:all:")
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
SOURCES = ("sitedispatch", "functions")
LEFT_OUT = ("sitedispatch/local", "sitedispatch/cli", "sitedispatch/__main__.py")  # never imported by Lambda


class BundlingError(RuntimeError):
    pass


def _source_files() -> list[Path]:
    files = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if path.is_file() and "__pycache__" not in relative and not relative.startswith(LEFT_OUT):
                files.append(path)
    return files


def inputs_digest() -> str:
    """Everything the bundle is made of: the lock and the code (a change to either makes a new bundle)."""
    digest = hashlib.sha256(LOCK.read_bytes())
    for path in _source_files():
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]


def build_bundle(target: Path) -> None:
    """pip for the Lambda platform, from the local wheelhouse only; then the code."""
    if not WHEELS.is_dir() or not any(WHEELS.glob("*.whl")):
        raise BundlingError(f"no Lambda wheels in {WHEELS}: run `make lambda-wheels` (downloads them once)")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
               "--find-links", str(WHEELS), "--require-hashes", "--no-deps", *PLATFORM, "--target", str(target),
               "-r", str(LOCK)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BundlingError(f"pip could not install the Lambda dependencies:\n{done.stderr[-2000:]}")
    for path in _source_files():
        destination = target / path.relative_to(ROOT)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
    for cache in target.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def cached_bundle() -> Path:
    BUNDLES.mkdir(parents=True, exist_ok=True)
    bundle = BUNDLES / inputs_digest()
    if not bundle.is_dir():
        scratch = Path(tempfile.mkdtemp(dir=BUNDLES, prefix="building-"))
        try:
            build_bundle(scratch)
            scratch.rename(bundle)  # atomic: a half-built bundle is never used
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        for old in BUNDLES.iterdir():  # keep the newest few
            if old.name != bundle.name and old.is_dir() and len(list(BUNDLES.iterdir())) > 4:
                shutil.rmtree(old, ignore_errors=True)
    return bundle


@jsii.implements(ILocalBundling)
class LocalBundling:
    """CDK's local bundling hook: fill `output_dir` here, so CDK never starts Docker."""

    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        shutil.copytree(cached_bundle(), output_dir, dirs_exist_ok=True)
        return True


def function_code() -> lambda_.Code:
    """One asset for every function (the handler differs). Its hash is the bundle's content."""
    return lambda_.Code.from_asset(
        str(ROOT / "functions"),  # nominal source (fingerprinted by CDK); the bundle is made from SOURCES
        asset_hash_type=AssetHashType.CUSTOM, asset_hash=inputs_digest(),
        bundling=BundlingOptions(image=DockerImage.from_registry("unused-local-bundling-only"),
                                 local=LocalBundling()),
    )
