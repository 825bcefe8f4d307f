"""git_status and git_diff: read-only views of a git work tree, safe in a hostile repository.

A directory the user downloaded may hold a `.git` whose config an attacker wrote, and git runs
programs named there (fsmonitor hook, filters, diff drivers, pager, promisor fetch, …). So git
runs here with command-line overrides, which win over every config file, for each setting that
could start a program, and with every filter driver the config names switched off by name.
Nothing is written (no optional locks, no index refresh: the index stays as it is), output
is capped while it is read, one timeout per call kills git and its children, its heap is
capped, and the environment is the reduced one that commands get. Secrets and blocked paths
the policy hides are left out of both results, and a diff's section of a file is returned
only when that file passes the read gate (cli/tools/gate.py), as read_file would read it.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from cli.errors import ToolError
from cli.fs import _platform, reading
from cli.fs.deadline import DeadlineExceeded
from cli.fs.paths import ResolvedPath, is_within
from cli.tools import gate
from cli.tools.base import Result, ToolContext
from cli.tools.definitions import DIFF_DEFAULT_BYTES, DIFF_MAX_BYTES
from cli.tools.shell import child_environment, kill_group

TIMEOUT_SECONDS = 10
STATUS_MAX_BYTES = 1_000_000
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

_DIFF_OPTIONS = (
    "--no-color",
    "--no-ext-diff",  # diff.external and diff.<driver>.command from .gitattributes
    "--no-textconv",  # diff.<driver>.textconv from .gitattributes
    "--ignore-submodules=all",
    "--submodule=short",
    "--no-relative",  # diff.relative would change the paths we attribute sections to
    "--src-prefix=a/",  # diff.noprefix and diff.mnemonicPrefix would too
    "--dst-prefix=b/",
)

_CHANGES = {
    "M": "modified",
    "T": "type changed",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
}
_CONFLICTS = {
    "DD": "both deleted",
    "AU": "added by us",
    "UD": "deleted by them",
    "UA": "added by them",
    "DU": "deleted by us",
    "AA": "both added",
    "UU": "both modified",
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


# -- status --------------------------------------------------------------------------------


@dataclass
class _Status:
    """What porcelain v2 said, before the policy's filter."""

    branch: dict[str, str] = field(default_factory=dict)
    entries: list[tuple[str, str, bytes, bytes | None]] = field(default_factory=list)


def _parse_status(data: bytes) -> _Status:
    """`git status --porcelain=v2 --branch -z`: NUL-ended records; a rename's record is
    followed by its original path. A record the cap cut short is dropped."""
    tokens = data.split(b"\0")
    tokens.pop()  # after the last NUL: empty, or a cut record
    status = _Status()
    it = iter(tokens)
    for token in it:
        kind, _, rest = token.partition(b" ")
        if kind == b"#":
            name, _, value = rest.partition(b" ")
            status.branch[name.decode("ascii", "replace")] = value.decode("utf-8", "replace")
        elif kind in (b"1", b"2", b"u"):
            fields = rest.split(b" ", {b"1": 7, b"2": 8, b"u": 9}[kind])
            orig = next(it, None) if kind == b"2" else None
            if kind == b"2" and orig is None:
                break  # its original path was cut off
            status.entries.append(
                (kind.decode(), fields[0].decode("ascii", "replace"), fields[-1], orig)
            )
        elif kind == b"?":
            status.entries.append(("?", "??", rest, None))
    return status


def git_status(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    repo = _open(ctx, paths)
    command = [
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--ahead-behind",
        "--find-renames",
        "--untracked-files=normal",  # an untracked dir is one entry, "dir/"
        "--ignored=no",
        "--ignore-submodules=all",
        "--",
        repo.spec,
    ]
    output = _run(repo.git, command, STATUS_MAX_BYTES)
    if output.code != 0 and not output.capped:
        raise _failure("status", output)
    parsed = _parse_status(output.out)
    result: Result = {
        "success": True,
        "root": _text(repo.root),
        "path": _text(ctx.show(repo.target)),
    }
    result.update(_branch(parsed.branch))
    result.update(_lists(ctx, repo.root, parsed.entries, output.capped))
    return result


def _branch(headers: Mapping[str, str]) -> Result:
    oid = headers.get("branch.oid", "(initial)")
    head = headers.get("branch.head", "")
    ahead = behind = None
    match = re.fullmatch(r"\+(\d+) -(\d+)", headers.get("branch.ab", ""))
    if match:
        ahead, behind = int(match[1]), int(match[2])
    return {
        "branch": None if head == "(detached)" else head or None,
        "detached": head == "(detached)",
        "head": None if oid == "(initial)" else oid[:12],  # None: no commit yet
        "upstream": headers.get("branch.upstream"),
        "ahead": ahead,
        "behind": behind,
    }


def _lists(
    ctx: ToolContext, root: str, entries: list[tuple[str, str, bytes, bytes | None]], capped: bool
) -> Result:
    """The entries the policy does not hide, sorted into lists, at most max_list_entries."""
    lists: dict[str, list[Any]] = {"staged": [], "unstaged": [], "untracked": [], "unmerged": []}
    cap = ctx.limits.max_list_entries
    hidden = shown = 0
    for kind, xy, raw, orig in entries:
        names = [os.path.join(root, os.fsdecode(p).rstrip("/")) for p in (raw, orig) if p]
        if any(ctx.hides(name) for name in names):
            hidden += 1
            continue
        shown += 1
        if shown <= cap:
            _sort_entry(
                lists,
                kind,
                xy,
                _text(ctx.show(names[0])) + ("/" if raw.endswith(b"/") else ""),
                _text(ctx.show(names[1])) if len(names) > 1 else None,
            )
    truncated = capped or shown > cap
    result: Result = {**lists, "clean": not entries and not capped, "truncated": truncated}
    note = _status_note(truncated, cap, hidden)
    if note:
        result["note"] = note
    return result


def _status_note(truncated: bool, cap: int, hidden: int) -> str:
    notes = []
    if truncated:
        notes.append(
            f"more changes than listed (at most {cap} entries, {STATUS_MAX_BYTES} bytes of git "
            "output); pass a subdirectory as path"
        )
    if hidden:
        notes.append(
            f"{hidden} changed path(s) not listed: secrets or blocked paths the policy hides"
        )
    return "; ".join(notes)


def _sort_entry(
    lists: dict[str, list[Any]], kind: str, xy: str, path: str, orig: str | None
) -> None:
    if kind == "?":
        lists["untracked"].append(path)
    elif kind == "u":
        lists["unmerged"].append({"path": path, "status": _CONFLICTS.get(xy, xy)})
    else:
        for side, code in (("staged", xy[0]), ("unstaged", xy[1])):
            if code == ".":
                continue
            item = {"path": path, "status": _CHANGES.get(code, code)}
            if orig is not None and code in "RC":
                item["from"] = orig
            lists[side].append(item)


# -- diff ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    """One file's part of a diff: its bytes and the repository paths it is about (None:
    they could not be told, so it is left out)."""

    data: bytes
    paths: tuple[bytes, ...] | None


def _sections(data: bytes) -> Iterator[_Section]:
    """Split before each top-level line: `diff --git`, `diff --cc` (a conflict) or
    `* Unmerged path`. Every line inside a file's part starts otherwise (` +-\\@`, `index`,
    `deleted file mode`, …), so file content cannot fake a split. Anything before the first
    split is not attributed to a file."""
    starts = [m.start() for m in re.finditer(rb"(?m)^(?:diff |\* )", data)]
    if data and (not starts or starts[0] != 0):
        starts.insert(0, 0)
    for begin, end in pairwise([*starts, len(data)]):
        chunk = data[begin:end]
        yield _Section(chunk, _section_paths(chunk))


def _section_paths(chunk: bytes) -> tuple[bytes, ...] | None:
    """The repository paths a section is about, from its whole lines only (the last one may
    be cut by the cap)."""
    lines = chunk.split(b"\n")[:-1]
    if not lines:
        return None
    for marker in (b"diff --cc ", b"diff --combined ", b"* Unmerged path "):
        if lines[0].startswith(marker):
            path = _unquote(lines[0][len(marker) :])
            return None if path is None else (path,)
    if not lines[0].startswith(b"diff --git ") or len(lines) < 2:
        return None  # cut before its second line: a rename cannot be told from a change
    if lines[1].startswith(b"similarity index "):
        named = [
            _unquote(line.split(b" ", 2)[2])
            for line in lines[2:4]
            if line.startswith((b"rename from ", b"rename to ", b"copy from ", b"copy to "))
        ]
        paths = tuple(p for p in named if p is not None)
        return paths if len(paths) == 2 else None
    return _same_paths(lines[0][len(b"diff --git ") :])


def _same_paths(header: bytes) -> tuple[bytes, ...] | None:
    """`a/X b/X` or `"a/X" "b/X"` (git quotes both or neither when the names are equal)."""
    if header.startswith(b'"'):
        first, rest = _quoted(header)
        second = _unquote(rest[1:]) if rest.startswith(b' "') else None
    else:
        half = (len(header) - 1) // 2
        first, second = header[:half], header[half + 1 :]
    if (
        first is None
        or second is None
        or not first.startswith(b"a/")
        or second != b"b/" + first[2:]
    ):
        return None
    return (first[2:],)


def _quoted(text: bytes) -> tuple[bytes | None, bytes]:
    """The C-quoted string at the start of `text`, unquoted, and what follows it."""
    n = 1
    while n < len(text) and text[n : n + 1] != b'"':
        n += 2 if text[n : n + 1] == b"\\" else 1
    return _unquote(text[: n + 1]), text[n + 1 :]


_ESCAPES = {b"a": 7, b"b": 8, b"t": 9, b"n": 10, b"v": 11, b"f": 12, b"r": 13, b'"': 34, b"\\": 92}


def _unquote(text: bytes) -> bytes | None:
    """A path as git prints it: as is, or in double quotes with C escapes (octal for bytes
    outside printable ASCII, as core.quotePath=true makes it)."""
    if not text.startswith(b'"'):
        return text
    if len(text) < 2 or not text.endswith(b'"'):
        return None
    body, out, n = text[1:-1], bytearray(), 0
    while n < len(body):
        char = body[n : n + 1]
        if char != b"\\":
            out += char
            n += 1
        elif body[n + 1 : n + 2] in _ESCAPES:
            out.append(_ESCAPES[body[n + 1 : n + 2]])
            n += 2
        elif re.fullmatch(rb"[0-3][0-7]{2}", body[n + 1 : n + 4]):
            out.append(int(body[n + 1 : n + 4], 8))
            n += 4
        else:
            return None
    return bytes(out)


def git_diff(
    ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]
) -> Result:
    cap = args.get("max_bytes", DIFF_DEFAULT_BYTES)
    if cap < 1:
        raise ToolError(f"max_bytes must be at least 1 (default {DIFF_DEFAULT_BYTES})")
    cap = min(cap, DIFF_MAX_BYTES)
    staged = bool(args.get("staged", False))
    repo = _open(ctx, paths)
    command = ["diff", *(["--cached"] if staged else []), *_DIFF_OPTIONS, "--", repo.spec]
    output = _run(repo.git, command, cap)
    if output.code != 0 and not output.capped:
        raise _failure("diff", output)
    # What lies below the path argument was put to a person if it is outside the allowed
    # dirs; without one, git ran in the working dir, which nobody was asked about.
    decided = paths["path"].real if "path" in paths else None
    return _diff_result(ctx, repo, output, staged, cap, decided)


def _diff_result(
    ctx: ToolContext, repo: _Repo, output: _Output, staged: bool, cap: int, decided: str | None
) -> Result:
    kept, files, hidden, unknown = bytearray(), list[str](), 0, 0
    refused: dict[str, int] = {}
    for section in _sections(output.out):
        if section.paths is None:
            unknown += 1
            continue
        names = [os.path.join(repo.root, os.fsdecode(p)) for p in section.paths]
        if any(ctx.hides(name) for name in names):
            hidden += 1
            continue
        rule = _gate_rule(ctx, names, decided)
        if rule in (gate.HIDDEN, gate.SECRET):
            hidden += 1  # a secret under another name is a secret
            continue
        if rule is not None:
            refused[rule] = refused.get(rule, 0) + 1
            continue
        kept += section.data
        files.append(_text(ctx.show(names[-1])))
    if output.capped and b"\n" in kept:
        del kept[kept.rfind(b"\n") + 1 :]  # end on a whole line
    result: Result = {
        "success": True,
        "root": _text(repo.root),
        "path": _text(ctx.show(repo.target)),
        "staged": staged,
        "diff": kept.decode("utf-8", "replace"),
        "bytes": len(kept),
        "truncated": output.capped,
        "files": files,
    }
    notes = [
        _diff_note(output.capped, cap, hidden, unknown, staged, not output.out),
        *gate.left_out(refused),
        *_unchecked_note(refused.get(_UNCHECKED, 0)),
    ]
    note = "; ".join(n for n in notes if n)
    if note:
        result["note"] = note
    return result


_UNCHECKED = "unchecked"


def _gate_rule(ctx: ToolContext, names: list[str], decided: str | None) -> str | None:
    """Why a section must be left out (a read gate rule, or _UNCHECKED), or None. Git read
    the work-tree files itself, so each of them is looked at now, reached and opened as the
    file tools reach a file (never through a symlink) and its fstat put to the gate. Checked
    after git ran: a file swapped for a hard link while git read it and swapped back before
    this look is not caught.

    The staged side (the index, HEAD) is blob content no file holds now: a section is left
    out when the file at its path is refused today (a blob staged from a hard link to a key
    is caught while that link is there); a blob whose file is gone, or no longer linked,
    cannot be told from any other content and is shown (docs/safety.md: a secret tracked by
    git stays readable through git). A file that is not there (a deletion) or not a regular
    file (a symlink, whose section holds its target's name, not its content) has no content
    of its own to check."""
    reads = gate.Reads(ctx, ctx.limits.max_read_bytes, under=decided)
    for name in names:
        try:
            info = reading.identify(ctx.target(name))
        except (ToolError, ValueError):
            return _UNCHECKED  # git saw something here that cannot be told now
        if info is None:
            continue
        refusal = reads.check(name, info)
        if refusal is not None:
            return refusal.rule
    return None


def _unchecked_note(count: int) -> list[str]:
    if not count:
        return []
    return [f"{gate.files(count, 'section')} left out: its work-tree file could not be checked"]


def _diff_note(capped: bool, cap: int, hidden: int, unknown: int, staged: bool, empty: bool) -> str:
    notes = []
    if capped:
        notes.append(
            f"diff cut at {cap} bytes (max_bytes, at most {DIFF_MAX_BYTES}); pass one file as "
            "path, or use git_status to see what changed"
        )
    if hidden:
        notes.append(f"{hidden} file(s) left out: secrets or blocked paths the policy hides")
    if unknown:
        notes.append(f"{unknown} file section(s) left out: their paths could not be read")
    if empty and not staged:
        notes.append("no unstaged changes here; pass staged: true for staged ones")
    elif empty:
        notes.append("no staged changes here; pass staged: false for unstaged ones")
    return "; ".join(notes)


def _text(path: str) -> str:
    """A path made valid text for JSON: bytes that are not UTF-8 become `\\xNN`."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
