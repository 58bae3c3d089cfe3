"""The console's vendored browser libraries, from tools/console-assets.json.

    python tools/console_assets.py fetch   download each npm tarball, check the registry's integrity hash (sha512),
                                           copy the files used (and the license) into the package, record their sha256
    python tools/console_assets.py check   each vendored file is there with the sha256 the lock records (offline)
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "tools" / "console-assets.json"
VENDOR = ROOT / "sitedispatch" / "console" / "static" / "vendor"


def _lock() -> dict[str, Any]:
    return dict(json.loads(LOCK.read_text()))


def fetch() -> None:
    lock = _lock()
    VENDOR.mkdir(parents=True, exist_ok=True)
    for package in lock["packages"]:
        with urllib.request.urlopen(package["tarball"], timeout=60) as response:
            tarball = response.read()
        algorithm, expected = package["integrity"].split("-", 1)
        digest = base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode()
        if digest != expected:
            raise SystemExit(f"{package['name']}@{package['version']}: the tarball's {algorithm} is not the lock's")
        sums = {}
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
            for member, target in package["files"].items():
                extracted = archive.extractfile(member)
                if extracted is None:
                    raise SystemExit(f"{package['name']}: {member} is not a file in the tarball")
                data = extracted.read()
                (VENDOR / target).write_bytes(data)
                sums[target] = hashlib.sha256(data).hexdigest()
        package["sha256"] = sums
        print(f"{package['name']}@{package['version']}: {', '.join(sums)}")
    LOCK.write_text(json.dumps(lock, indent=2) + "\n")


def problems(vendor: Path = VENDOR) -> list[str]:
    """What differs between the files in `vendor` and the lock (nothing: an empty list)."""
    found = []
    for package in _lock()["packages"]:
        for target, expected in package.get("sha256", {}).items():
            path = vendor / target
            if not path.exists():
                found.append(f"{target} is missing: run `make console-assets`")
            elif hashlib.sha256(path.read_bytes()).hexdigest() != expected:
                found.append(f"{target} differs from {package['name']}@{package['version']}: run `make console-assets`")
        if set(package.get("sha256", {})) != set(package["files"].values()):
            found.append(f"{package['name']}: the lock records no sha256 for every file: run `make console-assets`")
    return found


if __name__ == "__main__":
    if sys.argv[1:] == ["fetch"]:
        fetch()
    elif sys.argv[1:] == ["check"]:
        for problem in problems():
            print(problem)
        sys.exit(1 if problems() else 0)
    else:
        raise SystemExit(__doc__)
