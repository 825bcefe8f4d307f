"""Running git safely in a hostile repository, for git_status and git_diff (`git.py`).

A directory the user downloaded may hold a `.git` whose config an attacker wrote, and git runs
programs named there (fsmonitor hook, filters, diff drivers, pager, promisor fetch, …). So git
runs here with command-line overrides, which win over every config file, for each setting that
could start a program, and with every filter driver the config names switched off by name.
Nothing is written (no optional locks, no index refresh: the index stays as it is), output
is capped while it is read, one timeout per call kills git and its children, its heap is
capped, and the environment is the reduced one that commands get. The work tree is found and
checked here too: its git dirs must lie in it or in an allowed dir.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cli.errors import ToolError
from cli.fs import _platform
from cli.fs.deadline import DeadlineExceeded
from cli.fs.paths import ResolvedPath, is_within
from cli.tools.base import ToolContext
from cli.tools.shell import child_environment, kill_group

TIMEOUT_SECONDS = 10
_STDERR_MAX_BYTES = 16_384
_CONFIG_MAX_BYTES = 65_536
# Each driver costs four overrides in the environment; past this many, refuse rather than
# run git with a filter that is still live.
MAX_FILTER_DRIVERS = 100

# Global options, before the subcommand.
_OPTIONS = (
    "--no-pager",  # never start a pager, whatever core.pager or pager.<cmd> say
    "--no-optional-locks",  # status would otherwise rewrite the index to refresh it
    "--literal-pathspecs",  # the path we pass is a name, not a glob or :(magic)
    "--no-replace-objects",  # show objects as stored, not refs/replace substitutes
)

# `-c` settings are the command-line scope: they win over the system, global, repo and
# worktree config, including anything a hostile .git/config or its includes set.
_CONFIG = (
    # A hook program git asks "what changed?" on every status and diff.
    "core.fsmonitor=false",
    # Hooks (post-index-change, …) are looked up here: /dev/null holds none.
    "core.hooksPath=/dev/null",
    # A pager is a program (--no-pager and GIT_PAGER=cat say the same).
    "core.pager=cat",
    # An external diff program (--no-ext-diff says the same for diff.<driver>.command).
    "diff.external=",
    # Neither command opens an editor; were one ever asked for, `true` changes nothing.
    "core.editor=true",
    "sequence.editor=true",
    # A partial clone fetches missing objects on its own, through the remote's transport
    # (`ext::` runs any command): no ssh, no credential helper, no password prompt, no
    # transport (GIT_ALLOW_PROTOCOL below also beats protocol.<name>.allow in the repo).
    "core.sshCommand=false",
    "credential.helper=",
    "core.askPass=",
    "protocol.allow=never",
    # Submodules: git would run itself inside each one, under that repo's own config.
    "submodule.recurse=false",
    "status.submoduleSummary=false",
    "diff.ignoreSubmodules=all",
    "diff.submodule=short",
    # `git diff` rewrites the index to refresh stat data even under --no-optional-locks
    # (git 2.39): this is the switch that stops it.
    "diff.autoRefreshIndex=false",
    # The untracked cache is index state: neither trusted nor updated.
    "core.untrackedCache=false",
    # A bare repository planted inside a project is found by discovery and its config used.
    "safe.bareRepository=explicit",
    # What we parse: C-quoted paths, no colour, no order file read from a path the repo names.
    "core.quotePath=true",
    "color.ui=never",
    "diff.orderFile=/dev/null",
)

_ENVIRONMENT = {
    "GIT_TERMINAL_PROMPT": "0",  # never ask for a user name or password
    "GIT_ASKPASS": "",  # set but empty: no askpass program, and SSH_ASKPASS is not consulted
    "GIT_SSH_COMMAND": "false",  # beats core.sshCommand
    "GIT_ALLOW_PROTOCOL": "",  # no transport at all, whatever protocol.<name>.allow says
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_CONFIG_NOSYSTEM": "1",  # /etc/gitconfig is not ours to trust either
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "LC_ALL": "C",  # English messages (we match a few) and stable output
}

_NOT_A_WORK_TREE = (
    "not a git repository",
    "must be run in a work tree",
    "cannot use bare repository",
    "outside repository",
)


# -- running git ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Git:
    """How to run git for one tool call: the program, where, with what environment and
    limits. Every git run of the call shares one deadline."""

    program: str
    cwd: str
    env: Mapping[str, str]
    ctx: ToolContext
    deadline: float
    memory_bytes: int
    config: tuple[str, ...] = _CONFIG


@dataclass(frozen=True)
class _Output:
    code: int
    out: bytes
    err: str
    capped: bool


def _run(git: _Git, args: Sequence[str], cap: int) -> _Output:
    """Run one git command: stdin closed, output kept up to `cap` bytes, killed on timeout."""
    settings = (arg for setting in git.config for arg in ("-c", setting))
    command = [git.program, *_OPTIONS, *settings, *args]
    try:
        proc = subprocess.Popen(
            command,
            cwd=git.cwd,
            env=dict(git.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a kill reaches its children
        )
    except OSError as exc:
        raise ToolError(
            f"could not start git: {exc.strerror or exc}", hint="check the git install"
        ) from None
    try:
        _limit_memory(proc.pid, git.memory_bytes)
        out, err, capped = _read(proc, cap, git)
    finally:
        _stop(proc)
    return _Output(proc.returncode, out, err.decode("utf-8", "replace"), capped)


def _limit_memory(pid: int, limit: int) -> None:
    """Cap git's heap: a config can point core.attributesFile at /dev/zero, one endless line.
    Set after the start rather than in a preexec_fn, which is unsafe with threads; git has
    read nothing of the repository in that moment."""
    # Not Linux, or git already exited: nothing is set, and the timeout still holds.
    _platform.limit_memory(pid, limit, heap_only=True)


def _read(proc: subprocess.Popen[bytes], cap: int, git: _Git) -> tuple[bytes, bytes, bool]:
    """Stdout up to `cap` bytes (True when more came: git is then stopped), stderr up to
    _STDERR_MAX_BYTES; ToolError when the time is up."""
    assert proc.stdout is not None and proc.stderr is not None
    clock, deadline = git.ctx.clock, git.deadline
    out, err = bytearray(), bytearray()
    buffers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - clock()
            if remaining <= 0:
                raise _timed_out(git.ctx)
            for key, _ in selector.select(min(remaining, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                buffers[key.fd] += chunk
                if len(out) > cap:
                    return bytes(out[:cap]), bytes(err[:_STDERR_MAX_BYTES]), True
                del err[_STDERR_MAX_BYTES:]
    _wait(proc, deadline - clock(), git.ctx)
    return bytes(out), bytes(err), False


def _wait(proc: subprocess.Popen[bytes], remaining: float, ctx: ToolContext) -> None:
    try:
        proc.wait(timeout=max(remaining, 0.001))
    except subprocess.TimeoutExpired:
        raise _timed_out(ctx) from None


def _timed_out(ctx: ToolContext) -> ToolError:
    if ctx.deadline.expired:  # the call's own deadline came before git's
        return DeadlineExceeded(ctx.deadline)
    return ToolError(
        f"git did not finish within {TIMEOUT_SECONDS} s and was stopped",
        hint="pass a smaller path (a subdirectory or one file)",
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill git's process group (a no-op when it is done) and reap it."""
    kill_group(proc)
    proc.wait()


def _environment(ctx: ToolContext, cwd: str) -> dict[str, str]:
    """The command environment (no tokens, no GIT_DIR/GIT_CONFIG_* of ours) plus git's own
    safety switches. PATH keeps absolute entries only: a relative one ("." or empty) would
    find a `git` or helper the project itself ships."""
    env = child_environment(ctx.environ, cwd)
    entries = [p for p in env["PATH"].split(os.pathsep) if os.path.isabs(p)]
    env["PATH"] = os.pathsep.join(entries) or os.defpath
    env.update(_ENVIRONMENT)
    return env


def _find_git(path: str) -> str:
    program = shutil.which("git", path=path)
    if program is None:
        raise ToolError(
            "git is not installed (no `git` on PATH)",
            hint="use list_directory and read_file instead",
        )
    return program


def _failure(what: str, output: _Output) -> ToolError:
    return ToolError(
        f"git {what} failed: {_first_line(output.err) or f'exit status {output.code}'}",
        hint="these tools never fetch or write; the user can run git to see more",
    )


def _first_line(text: str) -> str:
    """The first error line git wrote, printable and short enough for one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = next(
        (ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[0] if lines else ""
    )
    return "".join(c if c.isprintable() else "?" for c in line)[:300]


# -- finding the work tree -----------------------------------------------------------------


@dataclass(frozen=True)
class _Repo:
    """A work tree ready to read: git hardened for it, its root, and what to look at."""

    git: _Git
    root: str  # the work tree's top, real path
    target: str  # the directory or file asked about (absolute)
    spec: str  # the same as a pathspec relative to git.cwd


def _open(ctx: ToolContext, paths: Mapping[str, ResolvedPath]) -> _Repo:
    """Check that the path is in a usable git work tree and prepare git for it."""
    target = paths["path"].real if "path" in paths else ctx.cwd
    cwd, spec = (target, ".") if os.path.isdir(target) else os.path.split(target)
    if not os.path.isdir(cwd):
        raise ToolError(
            f"{ctx.show(target)} does not exist", hint="pass a directory inside a git work tree"
        )
    env = _environment(ctx, cwd)
    memory = ctx.limits.command_memory_mb * 1024 * 1024
    deadline = ctx.clock() + min(TIMEOUT_SECONDS, ctx.deadline.left())
    git = _Git(_find_git(env["PATH"]), cwd, env, ctx, deadline, memory)
    root = _work_tree(git, ctx.show(cwd))
    _check_git_dirs(ctx, git, root)
    return _Repo(_without_filters(git), root, target, spec)


def _work_tree(git: _Git, shown: str) -> str:
    """The work tree's root; ToolError when `git.cwd` is not inside one."""
    output = _run(git, ["rev-parse", "--is-inside-work-tree", "--show-toplevel"], 65536)
    if "dubious ownership" in output.err:
        raise ToolError(
            f"git refuses the repository at {shown}: it belongs to another user (git's "
            "safe.directory check)",
            hint="ask the user to run git there or to trust it themselves",
        )
    lines = os.fsdecode(output.out).split("\n")
    if output.code != 0 and not any(s in output.err for s in _NOT_A_WORK_TREE):
        raise _failure("rev-parse", output)
    if output.code != 0 or lines[0] != "true":
        raise ToolError(
            f"{shown} is not inside a git work tree",
            hint="pass a path inside a repository's working files (not a bare repository, "
            "not inside .git)",
        )
    if len(lines) != 3 or lines[2] != "":
        raise ToolError(
            f"the work tree above {shown} has a newline in its path",
            hint="git_status and git_diff cannot work there; the user can run git",
        )
    root = os.path.realpath(lines[1])
    if not is_within(os.path.realpath(git.cwd), root):
        raise ToolError(f"{shown} is not inside a git work tree", hint="pass a path inside one")
    return root


def _check_git_dirs(ctx: ToolContext, git: _Git, root: str) -> None:
    """A `.git` file (or core.worktree) can point git at another repository on disk, whose
    index and objects would then be shown: its git dirs must lie in the work tree or in an
    allowed dir."""
    args = ["rev-parse", "--path-format=absolute", "--absolute-git-dir", "--git-common-dir"]
    output = _run(git, args, 65536)
    if output.code != 0:
        raise _failure("rev-parse", output)
    for raw in os.fsdecode(output.out).split("\n")[:-1]:
        place = os.path.realpath(raw)
        if ctx.hides(place):
            raise ToolError(
                "this work tree's git dir is in a place the policy blocks",
                hint="git_status and git_diff cannot work there; the user can run git",
            )
        if not is_within(place, root) and ctx.roots and ctx.root_of(place) is None:
            raise ToolError(
                f"this work tree's git dir {_text(place)} lies outside it and outside the allowed "
                "directories, where git_status and git_diff do not follow it",
                hint="the user can run git there",
            )


def _without_filters(git: _Git) -> _Git:
    """`git` with every filter driver the config defines switched off. A `.gitattributes`
    entry `filter=X` makes status and diff run filter.X.clean (or .process) when they re-read
    a file, and there is no wildcard to turn all drivers off: name each one. The names come
    from the same config git will read, asked through the same hardened invocation. They go
    into GIT_CONFIG_KEY_n/VALUE_n (command-line scope, like -c) because a name may hold '=',
    which `-c name=value` cannot carry."""
    output = _run(
        git, ["config", "-z", "--name-only", "--get-regexp", r"^filter\."], _CONFIG_MAX_BYTES
    )
    if output.code not in (0, 1):  # 1: no such key
        raise _failure("config", output)
    drivers = sorted(_driver_names(output.out))
    if output.capped or len(drivers) > MAX_FILTER_DRIVERS:
        raise ToolError(
            f"this repository's config defines more than {MAX_FILTER_DRIVERS} filter drivers, "
            "which git_status and git_diff cannot all switch off",
            hint="the user can run git there",
        )
    pairs = [
        (f"filter.{name}.{key}", value)
        for name in drivers
        for key, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))
    ]
    env = dict(git.env, GIT_CONFIG_COUNT=str(len(pairs)))
    for n, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    return replace(git, env=env)


def _driver_names(listing: bytes) -> set[str]:
    """`filter.<name>.<key>` → name (a name may hold dots; the key never does)."""
    names = set()
    for key in os.fsdecode(listing).split("\0"):
        middle, dot, _var = key.removeprefix("filter.").rpartition(".")
        if key.startswith("filter.") and dot and middle:
            names.add(middle)
    return names


def _text(path: str) -> str:
    """A path made valid text for JSON: bytes that are not UTF-8 become `\\xNN`."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
