"""The `sitedispatch` command line (typer + rich)."""
