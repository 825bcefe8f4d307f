"""The start-up baseline: a bare typer app with the options of `agent` and `agent run`, which
imports requests and sends the agent's first request, then exits. What start-up costs with
nothing but the two libraries the agent cannot do without.

    python bench/baseline_typer.py run [OPTIONS] PROMPT

The request is $BENCH_REQUEST ({"method", "path", "body"}), to --host or $OLLAMA_HOST."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

app = typer.Typer(
    name="agent",
    add_completion=True,
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo("baseline 0")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Version.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", hidden=True)] = False,
) -> None:
    pass


@app.command("run")
def run(
    prompt: Annotated[str, typer.Argument(metavar="PROMPT")],
    model: Annotated[str | None, typer.Option("-m", "--model")] = None,
    host: Annotated[str | None, typer.Option("--host")] = None,
    config: Annotated[str | None, typer.Option("-c", "--config")] = None,
    yes: Annotated[bool, typer.Option("-y", "--yes")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    max_steps: Annotated[int | None, typer.Option("--max-steps", min=1)] = None,
    think: Annotated[bool | None, typer.Option("--think/--no-think")] = None,
    think_level: Annotated[str | None, typer.Option("--think-level")] = None,
    api: Annotated[str | None, typer.Option("--api")] = None,
    no_instructions: Annotated[bool, typer.Option("--no-instructions")] = False,
    mcp_config: Annotated[str | None, typer.Option("--mcp-config")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    import requests

    request = json.loads(os.environ["BENCH_REQUEST"])
    base = (host or os.environ["OLLAMA_HOST"]).rstrip("/")
    response = requests.request(
        request["method"], base + request["path"], json=request.get("body"), timeout=30
    )
    response.raise_for_status()


if __name__ == "__main__":
    app()
