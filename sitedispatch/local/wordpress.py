"""Real WordPress sites on this machine, from Debian's packages: one MariaDB in a private data directory and one
`php -S` per site, each site a copy of /usr/share/wordpress with its own wp-config.php, the sitedispatch mu-plugin and
an application password for the dispatcher. Nothing is written outside the work directory; nothing listens beyond
127.0.0.1; WordPress's own outbound HTTP is blocked (WP_HTTP_BLOCK_EXTERNAL).

Needs the Debian packages listed in wordpress-packages.txt (beside this module).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from sitedispatch.drivers.wordpress.origin import MU_PLUGIN
from sitedispatch.local.supervisor import free_port, stop_process_groups

WORDPRESS_DIR = Path("/usr/share/wordpress")
PACKAGES = tuple(Path(__file__).with_name("wordpress-packages.txt").read_text().split())  # .ci/run reads it too
INSTALL_SCRIPT = Path(__file__).with_name("wp_install.php")
ROUTER_SCRIPT = Path(__file__).with_name("wp_router.php")
READY_TIMEOUT_S = 30.0
PHP_WORKERS = 4


def missing_programs() -> list[str]:
    """What this machine lacks to run local WordPress sites (empty: it can)."""
    wanted = {"php": "php-cli", "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server"}
    missing = [package for program, package in wanted.items() if shutil.which(program) is None]
    if not (WORDPRESS_DIR / "wp-settings.php").exists():
        missing.append("wordpress")
    return sorted(set(missing))


@dataclass(frozen=True)
class WordPressSite:
    name: str
    url: str  # http://127.0.0.1:PORT (WP_HOME)
    directory: Path
    credential_file: Path  # {"user": ..., "application_password": ...}: what the dispatcher's credential ref names

    @property
    def credential_ref(self) -> str:
        return f"file://{self.credential_file}"


class LocalWordPress:
    """MariaDB and PHP servers under `workdir`; a context manager that stops every process it started."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.resolve()
        self.sites: dict[str, WordPressSite] = {}
        self._processes: list[subprocess.Popen[bytes]] = []
        self.db_port = 0
        self.db_password = secrets.token_urlsafe(18)

    def __enter__(self) -> LocalWordPress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- processes -------------------------------------------------------------------------------------------------

    def _spawn(
        self, argv: list[str], log_name: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(self.workdir / log_name, "ab")  # noqa: SIM115 (the child owns it)
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        log.close()
        self._processes.append(process)
        return process

    def stop(self) -> None:
        stop_process_groups(list(reversed(self._processes)))
        self._processes.clear()

    # -- the database ------------------------------------------------------------------------------------------

    def start_database(self) -> None:
        data = self.workdir / "mariadb"
        fresh = not data.exists()
        data.mkdir(parents=True, exist_ok=True)
        if fresh:
            subprocess.run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={data}",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )
        self.db_port = free_port()
        self._spawn(
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={data}/mysql.sock",
                f"--port={self.db_port}",
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-log-bin",
                "--skip-name-resolve",
                f"--pid-file={data}/mariadbd.pid",
            ],
            "mariadb.log",
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self._sql("SELECT 1", check=False) != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"MariaDB did not start: see {self.workdir / 'mariadb.log'}")
            time.sleep(0.1)

    def _sql(self, statement: str, check: bool = True) -> int:
        result = subprocess.run(
            [
                "mariadb",
                "--no-defaults",
                f"--socket={self.workdir / 'mariadb' / 'mysql.sock'}",
                "-uroot",
                "-e",
                statement,
            ],
            capture_output=True,
            timeout=30,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"SQL failed: {result.stderr.decode(errors='replace').strip()}")
        return result.returncode

    # -- sites ---------------------------------------------------------------------------------------------------

    def add_site(self, name: str, title: str | None = None) -> WordPressSite:
        """Copy WordPress, configure it, serve it on a free port, install it and create an application password."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        directory = self.workdir / "sites" / name
        if directory.exists():
            shutil.rmtree(directory)
        shutil.copytree(WORDPRESS_DIR, directory, symlinks=False, ignore=shutil.ignore_patterns(".htaccess"))
        (directory / "wp-content" / "mu-plugins").mkdir(parents=True, exist_ok=True)
        (directory / "wp-content" / "uploads").mkdir(parents=True, exist_ok=True)
        shutil.copy(MU_PLUGIN, directory / "wp-content" / "mu-plugins" / MU_PLUGIN.name)
        database = "wp_" + name.replace("-", "_")
        # A fresh site, also in a work directory kept from an earlier run (the demo's): its database goes with its
        # files, and the user gets this run's password (an earlier run's would make WordPress refuse to connect).
        self._sql(
            f"DROP DATABASE IF EXISTS `{database}`; CREATE DATABASE `{database}` CHARACTER SET utf8mb4; "
            f"CREATE USER IF NOT EXISTS 'wordpress'@'127.0.0.1' IDENTIFIED BY '{self.db_password}'; "
            f"ALTER USER 'wordpress'@'127.0.0.1' IDENTIFIED BY '{self.db_password}'; "
            f"GRANT ALL ON `{database}`.* TO 'wordpress'@'127.0.0.1'"
        )
        (directory / "wp-config.php").write_text(self._config(database, url))
        env = {**os.environ, "PHP_CLI_SERVER_WORKERS": str(PHP_WORKERS), "SITEDISPATCH_WP_HOME": url}
        self._spawn(
            ["php", "-S", f"127.0.0.1:{port}", "-t", str(directory), str(ROUTER_SCRIPT)],
            f"php-{name}.log",
            env=env,
            cwd=directory,
        )
        installed = subprocess.run(
            ["php", str(INSTALL_SCRIPT), str(directory), title or name, f"admin@{name}.example"],
            capture_output=True,
            env=env,
            timeout=120,
        )
        if installed.returncode != 0:
            raise RuntimeError(f"installing {name} failed: {installed.stderr.decode(errors='replace')[-2000:]}")
        output = installed.stdout.decode(errors="replace").strip()
        try:
            answer = json.loads(output.splitlines()[-1])
        except (IndexError, ValueError):
            raise RuntimeError(f"installing {name} printed no answer: {output[-2000:]}") from None
        credential = self.workdir / "credentials" / f"{name}.json"
        credential.parent.mkdir(parents=True, exist_ok=True)
        credential.touch(mode=0o600)
        credential.write_text(
            json.dumps({"user": answer["user"], "application_password": answer["application_password"]})
        )
        self._wait_http(url)
        site = WordPressSite(name, url, directory, credential)
        self.sites[name] = site
        return site

    def run_php(self, site: WordPressSite, code: str) -> str:
        """Run PHP inside a site (WordPress loaded): what an administrator's shell would do. Returns stdout."""
        script = self.workdir / f"run-{site.name}.php"
        script.write_text(
            f"<?php\n$_SERVER['HTTP_HOST'] = '{site.url.split('://', 1)[1]}';\n"
            f"require '{site.directory}/wp-load.php';\n{code}\n"
        )
        result = subprocess.run(["php", str(script)], capture_output=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"PHP in {site.name} failed: {(result.stdout + result.stderr).decode()[-2000:]}")
        return result.stdout.decode()

    def _config(self, database: str, url: str) -> str:
        salts = "\n".join(
            f"define('{key}', '{secrets.token_hex(32)}');"
            for key in (
                "AUTH_KEY",
                "SECURE_AUTH_KEY",
                "LOGGED_IN_KEY",
                "NONCE_KEY",
                "AUTH_SALT",
                "SECURE_AUTH_SALT",
                "LOGGED_IN_SALT",
                "NONCE_SALT",
            )
        )
        return f"""<?php
// Written by `sitedispatch local wordpress up`.
define('DB_NAME', '{database}');
define('DB_USER', 'wordpress');
define('DB_PASSWORD', '{self.db_password}');
define('DB_HOST', '127.0.0.1:{self.db_port}');
define('DB_CHARSET', 'utf8mb4');
define('DB_COLLATE', '');
{salts}
$table_prefix = 'wp_';
define('WP_HOME', '{url}');
define('WP_SITEURL', '{url}');
define('WP_ENVIRONMENT_TYPE', 'local'); // application passwords over plain HTTP
define('DISABLE_WP_CRON', true);        // events run when the dispatcher's wp_cron operation calls wp-cron.php
define('WP_HTTP_BLOCK_EXTERNAL', true); // no traffic beyond this machine
define('AUTOMATIC_UPDATER_DISABLED', true);
define('WP_DEBUG', false);
if (!defined('ABSPATH')) {{
    define('ABSPATH', __DIR__ . '/');
}}
require_once ABSPATH . 'wp-settings.php';
"""

    @staticmethod
    def _wait_http(url: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(url + "/wp-json/", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer")
            time.sleep(0.1)
