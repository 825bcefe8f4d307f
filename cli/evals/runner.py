"""Running one task: a fresh project, the real agent loop, unattended, then its checks.

Every run of a task starts from nothing, in one scratch directory per eval:

    SCRATCH/run/project/    the working directory and the one allowed dir (the task's files)
    SCRATCH/run/            the dir beside it (the task's `../name` files)
    SCRATCH/run/home/       HOME, with the agent's config, state and data dirs below it

The project's path is the same for every task, so that the context block, which names it,
is the same too and the server's cached prefix holds from one task to the next. The agent
is built as `agent run --yes` builds it, with no terminal: the task's policy (the built-in
one with the task's keys over it), the user's `ollama:` and `agent:` settings (the task's
max_steps; no MCP servers), and an approver that approves what policy.unattended lists and
refuses the rest. Its change journal and audit records stay in the scratch home.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cli.config.settings import AgentConfig, Config, McpConfig
from cli.errors import AgentError, ToolError
from cli.evals.checks import Place, failed_checks, snapshot
from cli.evals.oracle import Oracle
from cli.evals.results import TaskRun
from cli.evals.tasks import During, Task
from cli.fs import reach
from cli.loop import outcomes
from cli.loop.approval import NoOneToAsk, UnattendedApprover
from cli.loop.events import Event, Finished, StepFinished, ToolResult
from cli.safety.policy import Policy
from cli.wiring import Choices, build_agent


@dataclass(frozen=True)
class Setup:
    """What every task of one eval runs with."""

    config: Config  # the user's (its ollama: and agent: sections are used)
    choices: Choices  # -m, --host, --api
    aids: tuple[str, ...]  # the aids in force (cli/config/settings.py AID_NAMES)
    environ: Mapping[str, str]  # the process's environment (PATH, OLLAMA_HOST, keys…)
    oracle: bool = False  # play each task's solution instead of asking a model


class EditFailed(Exception):
    """A task's `during` edit could not be made (the model left a file where it wants a
    directory, a symlink on its way…): that run fails with the reason, the eval goes on."""


def run_task(task: Task, setup: Setup, scratch: Path) -> TaskRun:
    """One run of `task` in `scratch`, from an empty project to its checks."""
    record = TaskRun(task.id, task.category)
    started = time.monotonic()
    try:
        place = _fresh(scratch / "run")
        _lay_out(task, place)
    except (OSError, ToolError, subprocess.SubprocessError) as exc:
        record.error = f"the task's project could not be made: {_said(exc)}"
        record.stop_reason = "error"
        record.failed_checks = [record.error]
        return record
    if setup.oracle and task.solution is None:
        record.error = "the task has no `solution:` for --oracle to play"
        record.stop_reason = "error"
        record.failed_checks = [record.error]
        return record
    watched = sorted({p for check in task.checks for p in check.paths})
    before = snapshot(place, watched)
    try:
        _drive(task, setup, place, record)
    except AgentError as exc:
        record.stop_reason, record.error = "error", exc.message
    except EditFailed as exc:
        record.stop_reason, record.error = "error", str(exc)
    record.wall_time = time.monotonic() - started
    record.failed_checks = failed_checks(task.checks, place, record.answer, before)
    if record.error is not None:
        record.failed_checks.insert(0, f"the run failed: {record.error}")
    record.passed = not record.failed_checks
    return record


def _said(exc: BaseException) -> str:
    if isinstance(exc, AgentError):
        return exc.message
    if isinstance(exc, subprocess.CalledProcessError):
        said = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        words = [str(word) for word in exc.cmd[1:]]
        while words[:1] == ["-c"]:
            words = words[2:]
        what = words[0] if words else "git"
        return f"git {what} failed: {said[-1] if said else f'exit {exc.returncode}'}"
    return str(exc)


def _fresh(root: Path) -> Place:
    """An empty `root`, as the last run left it or not: what that run's model left there
    (a dir it made unreadable, say) is made removable, or moved aside when it cannot be, so
    that every task gets the same project path."""
    if os.path.lexists(root):
        remove_tree(root)
    if os.path.lexists(root):
        aside = root.with_name(f"left-{time.monotonic_ns()}")
        os.rename(root, aside)  # only the scratch dir's own entry changes: always allowed
    project, home = root / "project", root / "home"
    project.mkdir(parents=True)
    home.mkdir()
    return Place(project, home)


def _opened(function: object, path: str, error: BaseException) -> None:
    """rmtree's error handler: the directory holding `path` gets its owner's rwx, once."""
    parent = os.path.dirname(path)
    try:
        for where in (parent, path):
            if os.path.isdir(where) and not os.path.islink(where):
                os.chmod(where, stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass  # left; _fresh moves the tree aside


def remove_tree(root: Path) -> None:
    """rm -rf, through what a model left unremovable (a dir it chmod-ed 000); what cannot go
    stays, without an error."""
    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=_opened)
    else:
        shutil.rmtree(root, onerror=lambda f, p, e: _opened(f, p, e[1]))


def _environ(setup: Setup, place: Place) -> dict[str, str]:
    """The process's environment with HOME and the XDG dirs in the scratch home: the user's
    own history, sessions, audit log and config are neither read nor written by a task."""
    home = place.home
    return {
        **setup.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
    }


def _config(task: Task, setup: Setup) -> Config:
    if setup.oracle:
        # The task alone decides: none of the user's agent: or models: keys (a tool_set of
        # compact would hide the tools a solution calls), so a task file proven here is so
        # everywhere.
        agent = AgentConfig(max_steps=task.max_steps, aids=list(setup.aids))
        return dataclasses.replace(
            setup.config, agent=agent, policy=task.policy, mcp=McpConfig(), models=[], lines={}
        )
    agent = dataclasses.replace(setup.config.agent, max_steps=task.max_steps, aids=list(setup.aids))
    return dataclasses.replace(setup.config, agent=agent, policy=task.policy, mcp=McpConfig())


def _drive(task: Task, setup: Setup, place: Place, record: TaskRun) -> None:
    config = _config(task, setup)

    def approver(policy: Policy) -> UnattendedApprover:
        unattended = config.policy.unattended
        return UnattendedApprover(unattended, NoOneToAsk(unattended, yes=True))

    agent = build_agent(
        setup.choices,
        config,
        environ=_environ(setup, place),
        cwd=str(place.project),
        home=str(place.home),
        approver=approver,
    )
    if setup.oracle:
        agent.backend = Oracle(task.solution)
    try:
        for event in _watched(agent.run([], task.prompt), task, place):
            _count(event, record)
    finally:
        agent.close()


def _watched(events: Iterator[Event], task: Task, place: Place) -> Iterator[Event]:
    """The loop's events, with the task's `during` edits made after the calls they follow."""
    calls = 0
    for event in events:
        yield event
        if isinstance(event, ToolResult):
            calls += 1
            for edit in task.during:
                if edit.after_call == calls:
                    try:
                        _write(edit, place)
                    except (OSError, ToolError) as exc:
                        raise EditFailed(f"a `during` edit failed: {_said(exc)}") from None


def _count(event: Event, record: TaskRun) -> None:
    if isinstance(event, ToolResult):
        word = outcomes.outcome(event.decision, event.result)
        counts = record.tool_calls
        error = event.result.get("error")
        record.calls.append(
            {
                "tool": event.call.name,
                "outcome": word,
                **({"error": str(error)[:300]} if error else {}),
                **({"repairs": list(event.call.repairs)} if event.call.repairs else {}),
            }
        )
        if word == "invalid":
            counts.invalid += 1
            return
        counts.valid += 1
        counts.repaired += bool(event.call.repairs)
        counts.refused += word in ("denied", "declined")
        counts.failed += word == "failed"
    elif isinstance(event, StepFinished):
        record.steps = event.step
        record.prompt_eval_tokens += event.stats.prompt_eval_count
    elif isinstance(event, Finished):
        record.stop_reason = event.stop_reason
        record.steps = event.steps
        record.answer = event.answer
        record.prompt_eval_tokens = event.stats.prompt_eval_count


_WRITE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_TRUNC
    | os.O_NOFOLLOW
    | os.O_NONBLOCK
    | getattr(os, "O_CLOEXEC", 0)
)


def _write(edit: During, place: Place) -> None:
    """The edit's files written (None: removed) beneath the scratch dir without following a
    symlink: after the model's calls, a directory on the way may be one it made."""
    for path, data in edit.files.items():
        _put(place, path, data)


def _put(place: Place, path: str, data: bytes | None) -> None:
    target = place.target(path)
    if data is None:
        if place.kind(path) == "missing":
            return
        with reach.parent_dir(target) as (dir_fd, name):
            os.unlink(name, dir_fd=dir_fd)
        return
    parent = os.path.dirname(target.path)
    if parent != target.root:
        reach.make_dirs(reach.Target(parent, target.root, os.path.dirname(path)))
    with reach.parent_dir(target) as (dir_fd, name):
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise OSError(f"{path} is there and is not a regular file")
        fd = os.open(name, _WRITE_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def _lay_out(task: Task, place: Place) -> None:
    for path, data in task.files.items():
        _put(place, path, data)
    if task.git is not None:
        _git(place, ["init", "--quiet", "--initial-branch=main"])
        _git(place, ["add", "--all"])
        _git(place, ["commit", "--quiet", "--allow-empty", "--message", "the task's files"])
        _write(During(1, task.git.changes), place)
        if task.git.stage:
            _git(place, ["add", "--", *task.git.stage])


def _git(place: Place, args: list[str]) -> None:
    """git in the project, with none of the user's config (a fixed author and date)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(place.home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "eval",
        "GIT_AUTHOR_EMAIL": "eval@example.invalid",
        "GIT_COMMITTER_NAME": "eval",
        "GIT_COMMITTER_EMAIL": "eval@example.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T12:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T12:00:00Z",
    }
    git = shutil.which("git")
    if git is None:
        raise OSError("git is not installed, and the task needs a git history")
    # Nothing of the project's runs: no hooks, no fsmonitor (a task cannot write .git/ itself,
    # cli/evals/tasks.py; this holds whatever it finds there).
    quiet = ["-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}"]
    subprocess.run(
        [git, *quiet, *args],
        cwd=place.project,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


def run_all(
    tasks: list[Task],
    setup: Setup,
    scratch: Path,
    repeat: int = 1,
    done: Callable[[TaskRun, int, int], None] | None = None,
) -> list[TaskRun]:
    """Each task `repeat` times, one after the other; `done(run, index, total)` after each."""
    runs: list[TaskRun] = []
    total = len(tasks) * repeat
    for task in tasks:
        for _ in range(repeat):
            run = run_task(task, setup, scratch)
            runs.append(run)
            if done is not None:
                done(run, len(runs), total)
    return runs
