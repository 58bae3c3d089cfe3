from sitedispatch.cli.main import app

app(prog_name="sitedispatch")
