"""`sitedispatch local cloud|worker|scheduler|up`: the embedded local runtime."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sitedispatch.cli.context import DEFAULT_LOCAL_ENV, deps, load_local_env, require_running_cloud
from sitedispatch.cli.output import console, reported
from sitedispatch.domain.resources import DEFAULT_FUNCTION_TIMEOUT_S, LOCAL_API_ENVIRONMENTS, QUEUES

if TYPE_CHECKING:
    from sitedispatch.local.supervisor import LocalRuntime

app = typer.Typer(
    help="Run the whole system on this machine (moto server + event source mapping emulation).", no_args_is_help=True
)


def _policy(pairs: list[str]) -> dict[str, str]:
    policy = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"--set takes FIELD=VALUE, got {pair!r}")
        policy[key] = value
    return policy


@app.command("cloud")
def cloud(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: any free port)")] = 4566,
    env_file: Annotated[
        Path, typer.Option(help="where to write the environment for other processes")
    ] = DEFAULT_LOCAL_ENV,
    function_timeout: Annotated[
        int, typer.Option(help="function timeout in seconds; queue visibility is 6x this, the lease 1x")
    ] = DEFAULT_FUNCTION_TIMEOUT_S,
    set_: Annotated[list[str] | None, typer.Option("--set", help="policy setting FIELD=VALUE")] = None,
    strict: Annotated[
        bool, typer.Option(help="behave as AWS where moto is kinder: transaction conflicts (docs/aws-semantics.md)")
    ] = False,
    seed: Annotated[int, typer.Option(help="the seed of --strict's choices")] = 0,
    sqs_s3_endpoint: Annotated[
        str | None,
        typer.Option(help="keep the queues and the bucket on this emulator (LocalStack on 127.0.0.1), the tables here"),
    ] = None,
    template: Annotated[
        Path | None,
        typer.Option(help="deploy this template instead of the one synthesized from the checkout (an edited copy)"),
    ] = None,
) -> None:
    """Start a moto server on 127.0.0.1 holding the stack, deployed from its synthesized template, IAM enforced."""
    from sitedispatch.local.cloud import serve

    with reported(False):
        serve(
            port,
            env_file,
            function_timeout,
            _policy(set_ or []),
            seed if strict else None,
            sqs_s3_endpoint,
            template=template,
        )


@app.command("api")
def api(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: any free port)")] = 0,
    env_file: Annotated[Path, typer.Option(help="the local runtime's env file: the API's URL is added to it")] = (
        DEFAULT_LOCAL_ENV
    ),
    environments: Annotated[
        int, typer.Option(min=1, max=64, help="API function environments, started warm: requests served at once")
    ] = LOCAL_API_ENVIRONMENTS,
) -> None:
    """Serve the HTTP API on 127.0.0.1 (API Gateway's part: the API function behind a real HTTP server)."""
    from sitedispatch.local.gateway import serve

    with reported(False):
        load_local_env()
        serve(port, env_file, environments)


@app.command("worker")
def worker(
    queue: Annotated[str, typer.Option(help=f"one of {', '.join(QUEUES)}")] = "operations",
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="execution environments")] = 1,
    timeout: Annotated[int | None, typer.Option(help="override the function timeout (s)")] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, max=10, help="override the batch size")] = None,
    handler: Annotated[
        str | None,
        typer.Option(help="invoke module.function instead of the queue's function (experiments, emulator tests)"),
    ] = None,
) -> None:
    """Event source mapping emulation: poll the queue and invoke the real Lambda handler."""
    from sitedispatch.local.esm import run_worker

    with reported(False):
        deps()  # started in another shell: find the running local runtime as the other commands do, or say so
        require_running_cloud()
    if queue not in QUEUES:
        raise typer.BadParameter(f"unknown queue {queue!r}; queues: {', '.join(QUEUES)}")
    raise typer.Exit(run_worker(queue, concurrency, timeout_s=timeout, batch_size=batch_size, handler=handler))


@app.command("scheduler")
def scheduler(
    rate_scale: Annotated[float, typer.Option(help="multiply every schedule's rate")] = 1.0,
    once: Annotated[bool, typer.Option(help="fire every schedule once and exit")] = False,
) -> None:
    """Fire the schedules (EventBridge Scheduler's part) at their rates."""
    from sitedispatch.domain.settings import Settings
    from sitedispatch.local.scheduler import run_scheduler

    with reported(False):
        deps()
        require_running_cloud()
    raise typer.Exit(run_scheduler(Settings().region, rate_scale, once))


@app.command("up")
def up(
    port: Annotated[int, typer.Option(help="cloud port on 127.0.0.1")] = 4566,
    workers: Annotated[int, typer.Option(min=1, help="worker processes")] = 2,
    concurrency: Annotated[int, typer.Option(min=1, help="environments per worker")] = 5,
    workdir: Annotated[Path, typer.Option(help="logs and env file")] = DEFAULT_LOCAL_ENV.parent,
) -> None:
    """Cloud, API, workers and scheduler as child processes. Ctrl-C stops them all, at any moment."""
    stop, up = threading.Event(), threading.Event()

    def interrupted(*_: object) -> None:
        stop.set()
        if not up.is_set():  # still starting: stop now, not once every child is ready
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the stopping short
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        code = _run_up(port, workers, concurrency, workdir, stop, up)
    except KeyboardInterrupt:
        console.print("interrupted while starting: stopped")
        raise typer.Exit(130) from None
    console.print("stopped")
    raise typer.Exit(code)


def _run_up(
    port: int, workers: int, concurrency: int, workdir: Path, stop: threading.Event, up: threading.Event
) -> int:
    """Start everything, then wait for Ctrl-C (0) or a child that exits (1); the env file goes with the runtime."""
    from sitedispatch.local.supervisor import LocalRuntime

    code = 0
    with reported(False), LocalRuntime(workdir) as runtime:
        try:
            code = _serve_up(runtime, port, workers, concurrency, workdir, stop, up)
        finally:
            runtime.env_file.unlink(missing_ok=True)  # nothing answers there any more: the CLI says so
    return code


def _serve_up(
    runtime: LocalRuntime,
    port: int,
    workers: int,
    concurrency: int,
    workdir: Path,
    stop: threading.Event,
    up: threading.Event,
) -> int:
    env = runtime.start_cloud(port)
    api_url = runtime.start_api()
    runtime.start_workers(
        [(q, concurrency, None, None, None) for _ in range(workers) for q in ("operations", "bulk", "publications")]
        + [
            ("events", 1, None, None, None),  # one principal's events go one batch at a time: one environment
            ("webhooks", concurrency, None, None, None),  # one wake per endpoint at a time (its message group)
        ]
    )
    runtime.start_scheduler()
    up.set()
    console.print(
        f"[green]local runtime up[/]: API {api_url}; cloud {env['AWS_ENDPOINT_URL']}; {workers} operations, "
        f"{workers} bulk and {workers} publications workers x {concurrency} environments; an events worker; "
        "a webhooks worker; scheduler; "
        f"logs in {workdir}/"
    )
    console.print(f"other shells find it through {runtime.env_file} (the CLI reads it by default). Ctrl-C stops.")
    console.print("its state (sites, operations, content) is in memory: stopping it, or a restart, forgets all of it")
    while not stop.wait(1.0):
        dead = [c.name for c in runtime.children if not c.alive()]
        if dead:
            console.print(f"[red]exited:[/] {', '.join(dead)} (see its log in {workdir}/); stopping")
            return 1
    return 0


wordpress_app = typer.Typer(
    help="Real WordPress sites on this machine (Debian's packages; see the README).", no_args_is_help=True
)
app.add_typer(wordpress_app, name="wordpress")


@wordpress_app.command("up")
def wordpress_up(
    sites: Annotated[int, typer.Option("--sites", min=1, max=50, help="how many sites")] = 1,
    prefix: Annotated[str, typer.Option(help="site ids are PREFIX-1, PREFIX-2, ...")] = "wp",
    workdir: Annotated[Path, typer.Option(help="database, site copies, credentials, logs")] = DEFAULT_LOCAL_ENV.parent
    / "wordpress",
    register: Annotated[
        bool, typer.Option(help="register the sites with the local runtime's dispatcher (needs `local up` running)")
    ] = True,
    as_: Annotated[str, typer.Option("--as", help="the principal owning the sites")] = "tenant-a",
) -> None:
    """Start MariaDB and one `php -S` per site, install WordPress with the sitedispatch mu-plugin and an
    application password, and register each site (driver wordpress). Ctrl-C stops them."""
    from sitedispatch.cli.context import client
    from sitedispatch.domain.model import WORDPRESS_DRIVER
    from sitedispatch.local.wordpress import PACKAGES, LocalWordPress, missing_programs

    missing = missing_programs()
    if missing:
        console.print(
            f"[red]missing packages:[/] {', '.join(missing)}; install with: apt-get install -y "
            f"--no-install-recommends {' '.join(PACKAGES)}"
        )
        raise typer.Exit(2)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalWordPress(workdir) as wordpress:
        wordpress.start_database()
        for n in range(1, sites + 1):
            site = wordpress.add_site(f"{prefix}-{n}")
            line = f"{site.name}: {site.url} (credential {site.credential_file})"
            if register:
                with reported(False):
                    client(as_).call(
                        "POST",
                        "/sites",
                        body={
                            "site_id": site.name,
                            "driver": WORDPRESS_DRIVER,
                            "url": site.url,
                            "credential": site.credential_ref,
                        },
                    )
                line += (
                    f"; registered for {as_}: sitedispatch submit provision --site {site.name} "
                    f"--param title={site.name} --param admin_email=admin@{site.name}.example --as {as_}"
                )
            console.print(line)
        console.print(f"[green]WordPress up[/]: {sites} site(s), logs in {workdir}/. Ctrl-C stops.")
        stop.wait()
    console.print("stopped")
