"""The console's vendored browser libraries are the lock's, byte for byte, with their licenses (no CDN)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> object:
    spec = importlib.util.spec_from_file_location("console_assets", ROOT / "tools" / "console_assets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_vendored_file_has_the_locks_sha256_and_a_license(tmp_path: Path) -> None:
    tool = _tool()
    assert tool.problems() == []  # type: ignore[attr-defined]
    lock = json.loads((ROOT / "tools" / "console-assets.json").read_text())
    for package in lock["packages"]:
        assert package["integrity"].startswith("sha512-") and package["license"]
        assert any(target.endswith("LICENSE") for target in package["files"].values())
    # the check can fail: a changed byte, a missing file
    copy = tmp_path / "vendor"
    shutil.copytree(tool.VENDOR, copy)  # type: ignore[attr-defined]
    (copy / "htmx.min.js").write_bytes((copy / "htmx.min.js").read_bytes() + b"\n")
    (copy / "uPlot.LICENSE").unlink()
    assert tool.problems(copy) == [  # type: ignore[attr-defined]
        "htmx.min.js differs from htmx.org@2.0.11: run `make console-assets`",
        "uPlot.LICENSE is missing: run `make console-assets`",
    ]


def test_no_page_names_another_origin() -> None:
    templates = (ROOT / "sitedispatch" / "console" / "templates").glob("*.html")
    for template in templates:
        text = template.read_text()
        assert "https://" not in text and "http://" not in text and "<script>" not in text, template.name
