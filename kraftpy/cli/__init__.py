"""The `kraftpy` command line: typer commands over the packages below it."""
