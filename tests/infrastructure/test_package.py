"""The installed package: `pip install` puts `sitedispatch` alone on the path, with everything it runs (the Lambda
entrypoints, the local runtime, the demo and their data), and nothing of the checkout around it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from sitedispatch.domain.resources import FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sitedispatch"


def test_the_wheel_ships_the_package_alone_with_its_entrypoints_and_data(tmp_path: Path) -> None:
    source = tmp_path / "source"  # built from a copy: setuptools' build/ keeps files a checkout has since removed
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(PACKAGE, source / "sitedispatch", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=source,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sitedispatch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {name.split("/")[0] for name in names} == {"sitedispatch", wheel.name.split("-py3")[0] + ".dist-info"}
    sources = {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert sources <= names, sorted(sources - names)
    for spec in FUNCTIONS.values():  # Lambda's handler names resolve inside the package
        assert spec.handler.rsplit(".", 1)[0].replace(".", "/") + ".py" in names
    assert "sitedispatch/drivers/wordpress/mu-plugin/sitedispatch.php" in names
    assert "sitedispatch/drivers/reference/templates/base.html" in names


def test_no_module_of_the_package_reads_the_checkout_around_it() -> None:
    """The demo generates its export; nothing finds files by climbing out of the package (tests/, stacks/)."""
    climbing = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        for line in path.read_text().splitlines()
        if ".parents[" in line or '"tests"' in line or "from stacks" in line or "import stacks" in line
    ]
    assert climbing == []
