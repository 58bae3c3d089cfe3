"""`sitedispatch console`: the operator console in a browser, a client of the API as every command is."""

from __future__ import annotations

from typing import Annotated

import typer

from sitedispatch.cli.args import AsOpt
from sitedispatch.cli.context import client
from sitedispatch.cli.output import console as out
from sitedispatch.cli.output import reported


def console(
    port: Annotated[int, typer.Option(min=0, max=65535, help="the port on 127.0.0.1 (0: a free one)")] = 0,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="hide every action (the API still decides what you may do)")
    ] = False,
    as_: AsOpt = None,
) -> None:
    """Serve the operator console on 127.0.0.1 and print its URL (with a fresh token: open it, do not share it).
    Every page is what the API answers you; every action is an API call, authorized and audited by the server."""
    with reported(False):
        api = client(as_)
        from sitedispatch.console import console_server

        who = api.identity or _signed_identity()
        try:
            server = console_server(api, port=port, read_only=read_only, caller=who)
        except OSError as exc:
            from sitedispatch.domain.errors import InvalidInput

            raise InvalidInput(f"port {port} on 127.0.0.1 is taken ({exc.strerror}): pass --port 0", "port") from None
        api.call("GET", "/status")  # the API answers (and these credentials are let in) before a URL is given
        out.print(f"sitedispatch console for [bold]{who}[/]{' (read-only)' if read_only else ''}: open")
        out.print(server.gate.url, soft_wrap=True, highlight=False)
        out.print("Ctrl-C stops it.")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


def _signed_identity() -> str:
    """Whose credentials sign the console's requests on AWS (shown on every page; the API decides the rest)."""
    try:
        import boto3

        return str(boto3.client("sts").get_caller_identity()["Arn"])
    except Exception:
        return "your AWS credentials"
