"""`agent eval`: run a suite of file tasks against a model and say how many it finished,
checked by their end state (docs/eval.md)."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.frame import ApiOpt, ConfigOpt, HostOpt, ModelOpt, Terminal, print_json
from cli.errors import ExitStatus, Stopped, UsageError

if TYPE_CHECKING:
    from cli.evals.results import TaskRun
    from cli.evals.tasks import Task

# The scratch dir's name. Not "eval": the built-in command deny list has `\beval\b`, and
# the model is told the project's path.
SCRATCH_PREFIX = "metona-tasks-"

# What this module adds to `agent`: cli.app's COMMANDS names it.
commands = typer.Typer()

OutputFormatOpt = Annotated[
    str,
    typer.Option(
        "--output-format",
        metavar="text|json",
        help="What stdout carries: text (a table and the summary) or json (the results, "
        "whose schema is in docs/eval.md).",
    ),
]
CompareOpt = Annotated[
    tuple[str, str] | None,
    typer.Option(
        "--compare",
        metavar="A.json B.json",
        help="Compare two results files (written with --output-format json) and run nothing.",
    ),
]


@commands.command(
    "eval",
    help="Run file tasks against a model, each in a fresh temporary project, unattended "
    "under the task's policy, and check their end state and answer: which of my models can "
    "do this? Prints a table and the pass rate with its 95% interval (overall and by "
    "category); a progress bar goes to stderr. Exit codes: 0 every run passed, 1 server or "
    "model failure, 2 usage or task-file error, 3 some runs failed. See docs/eval.md.",
)
def eval_(
    model: ModelOpt = None,
    host: HostOpt = None,
    config: ConfigOpt = None,
    api: ApiOpt = None,
    tasks: Annotated[
        str | None,
        typer.Option(
            "--tasks",
            metavar="FILE|DIR",
            help="A task file, or a directory of them (default: the built-in suite).",
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option("--only", metavar="ID,…", help="Run only these tasks (their ids)."),
    ] = None,
    repeat: Annotated[
        int,
        typer.Option("--repeat", min=1, max=1000, metavar="N", help="Run each task N times."),
    ] = 1,
    aids: Annotated[
        str | None,
        typer.Option(
            "--aids",
            metavar="on|off|NAME,…",
            help="The aids for small models in force: on, off, or a list of repair, "
            "profiles, compact, constrained, user_results (default: agent.aids).",
        ),
    ] = None,
    oracle: Annotated[
        bool,
        typer.Option(
            "--oracle",
            help="Play each task's reference solution through a built-in scripted model "
            "instead of asking one: proves a task file solvable and its checks right.",
        ),
    ] = False,
    output_format: OutputFormatOpt = "text",
    compare: CompareOpt = None,
    listing: Annotated[
        bool, typer.Option("--list", help="List the tasks (id, category, prompt) and run nothing.")
    ] = False,
) -> None:
    terminal = Terminal.from_process()
    if output_format not in ("text", "json"):
        raise UsageError(f"--output-format {output_format}: expected text or json")
    if compare is not None:
        _refuse_run_flags(
            {
                "--tasks": tasks is not None,
                "--only": only is not None,
                "--oracle": oracle,
                "--list": listing,
                "--repeat": repeat != 1,
                "--aids": aids is not None,
                "-m": model is not None,
                "--host": host is not None,
            }
        )
        _compare(terminal, compare, output_format)
        raise typer.Exit(ExitStatus.OK)
    from cli.evals.tasks import builtin_suite, load_tasks, select

    chosen = select(load_tasks(tasks) if tasks else builtin_suite(), only)
    if listing:
        _list(terminal, chosen, output_format)
        raise typer.Exit(ExitStatus.OK)
    code = _evaluate(
        terminal, chosen, model, host, config, api, aids, oracle, repeat, output_format
    )
    raise typer.Exit(code)


def _refuse_run_flags(given: dict[str, bool]) -> None:
    """--compare runs nothing: UsageError naming the flags given that only a run takes."""
    ignored = [flag for flag, present in given.items() if present]
    if ignored:
        raise UsageError(f"--compare runs nothing: leave out {', '.join(ignored)}")


def aids_choice(text: str | None, configured: frozenset[str]) -> tuple[str, ...]:
    """--aids as the aids in force, in their documented order."""
    from cli.config.settings import AID_NAMES

    if text is None:
        chosen = configured
    elif text.strip() in ("on", "off"):
        chosen = frozenset(AID_NAMES) if text.strip() == "on" else frozenset()
    else:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in AID_NAMES]
        if unknown or not names:
            raise UsageError(f"--aids {text}: expected on, off or a list of {', '.join(AID_NAMES)}")
        chosen = frozenset(names)
    return tuple(name for name in AID_NAMES if name in chosen)


def _evaluate(
    terminal: Terminal,
    tasks: list[Task],
    model: str | None,
    host: str | None,
    config_path: str | None,
    api: str | None,
    aids_text: str | None,
    oracle: bool,
    repeat: int,
    output_format: str,
) -> ExitStatus:
    from cli.backends.messages import ServesOneModel
    from cli.commands.signals import run_signals, stopped_line
    from cli.config.settings import aids_of
    from cli.evals.oracle import ORACLE_MODEL
    from cli.evals.runner import Setup, remove_tree, run_all
    from cli.ui.eval_view import Progress
    from cli.wiring import Choices, build_backend, load, model_chosen

    loaded = load(Choices(config_path=config_path), terminal.environ)
    aids = aids_choice(aids_text, aids_of(loaded.agent.aids))
    choices = Choices(ORACLE_MODEL if oracle else model, host, config_path, api=api)
    name = choices.model or loaded.ollama.model
    where = "oracle://built-in"
    if not oracle:
        backend = build_backend(choices, loaded, terminal.environ)
        where = backend.host
        if not model_chosen(choices, loaded) and isinstance(backend, ServesOneModel):
            # as each run's agent does (cli/loop/agent.py): a server of one model, that one
            name = backend.only_model() or name
        info = backend.model_info(name)  # an unreachable server or a missing model: exit 1
        name = info.name
    setup = Setup(loaded, choices, aids, terminal.environ, oracle=oracle)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    progress = Progress(terminal.stderr, len(tasks) * repeat)
    runs: list[TaskRun] = []
    try:
        with run_signals(), progress:
            runs = run_all(tasks, setup, scratch, repeat, done=progress.done)
    except (KeyboardInterrupt, Stopped) as exc:
        # Ctrl-C, SIGTERM (`timeout 600 agent eval`) or SIGHUP: the runs done so far are
        # reported, the scratch dir goes, and the exit code says which signal it was.
        code = exc.exit_code if isinstance(exc, Stopped) else ExitStatus.INTERRUPTED
        how = "interrupted" if isinstance(exc, KeyboardInterrupt) else stopped_line(exc.signum)
        with contextlib.suppress(OSError, ValueError):
            terminal.stderr.write(f"agent: eval {how} after {len(progress.runs)} runs\n")
        runs = progress.runs
        _report(terminal, runs, name, aids, where, oracle, repeat, output_format)
        return code
    finally:
        remove_tree(scratch)
    _report(terminal, runs, name, aids, where, oracle, repeat, output_format)
    return ExitStatus.OK if all(run.passed for run in runs) else ExitStatus.UNFINISHED


def _report(
    terminal: Terminal,
    runs: list[TaskRun],
    model: str,
    aids: tuple[str, ...],
    host: str,
    oracle: bool,
    repeat: int,
    output_format: str,
) -> None:
    from cli.evals.results import results_json
    from cli.ui.eval_view import results_table

    if output_format == "json":
        meta = {"host": host, "oracle": oracle, "repeat": repeat}
        print_json(terminal.stdout, results_json(runs, model=model, aids=aids, meta=meta))
    else:
        terminal.stdout.write("\n".join(results_table(runs, model, aids)) + "\n")
    terminal.stdout.flush()


def _compare(terminal: Terminal, paths: tuple[str, str], output_format: str) -> None:
    from cli.evals.results import compare, read_results

    compared = compare(read_results(paths[0]), read_results(paths[1]))
    if output_format == "json":
        print_json(terminal.stdout, compared)
        return
    from cli.ui.eval_view import comparison_lines

    terminal.stdout.write("\n".join(comparison_lines(compared)) + "\n")


def _list(terminal: Terminal, tasks: list[Task], output_format: str) -> None:
    if output_format == "json":
        listed = [{"id": t.id, "category": t.category, "prompt": t.prompt} for t in tasks]
        print_json(terminal.stdout, listed)
        return
    from cli.ui.eval_view import task_lines

    terminal.stdout.write("\n".join(task_lines(tasks)) + "\n")
