"""The mu-plugin's own tests (tests/php/fence_test.php), run by the PHP CLI inside a freshly installed site:
compare-and-set fencing, REST refusals, two racing PHP processes, the info endpoint."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sitedispatch.local.wordpress import LocalWordPress
from tests.acceptance.test_wordpress import wordpress  # noqa: F401 (the module's shared WordPress)

PHP_TESTS = Path(__file__).resolve().parents[1] / "php" / "fence_test.php"


def test_the_mu_plugin_php_tests_pass(wordpress: LocalWordPress) -> None:  # noqa: F811
    site = wordpress.add_site("wp-plugin")
    result = subprocess.run(
        ["php", str(PHP_TESTS), str(site.directory)],
        capture_output=True,
        timeout=120,
        env={**os.environ, "SITEDISPATCH_WP_HOME": site.url},
    )
    output = result.stdout.decode() + result.stderr.decode()
    print("\n" + output)
    assert result.returncode == 0, output
    assert "FAIL" not in output and output.count("ok   ") >= 15
