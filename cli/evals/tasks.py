"""Task files: YAML whose top level is `tasks:`, a list of tasks (docs/eval.md says every key).

A task is what a person would ask (`prompt`) in a project made of `files` (and a git history
when `git` says so), under a `policy` that overrides the built-in one's keys, and the
`checks` its end state and answer must pass. `solution` is a reference run: the calls, in
order, and the answer, which `agent eval --oracle` plays to prove the task solvable and its
checks right. Every error names the file, the line, the task and the key, in one line.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from cli.config.loading import build_section
from cli.config.settings import TOOL_NAMES, PolicyConfig, kind_of, read_yaml, shortened
from cli.errors import ConfigError

# The checks a task may make, and what each takes (docs/eval.md).
FILE_CHECKS = ("file_equals", "file_contains", "file_matches", "file_exists", "file_absent")
ANSWER_CHECKS = ("answer_contains", "answer_matches", "answer_excludes")
CHECKS = (*FILE_CHECKS, "unchanged", *ANSWER_CHECKS)
TASK_KEYS = (
    "id",
    "category",
    "prompt",
    "files",
    "git",
    "policy",
    "checks",
    "solution",
    "during",
    "max_steps",
)
DEFAULT_MAX_STEPS = 10
MAX_TASK_FILE_BYTES = 4 * 1024 * 1024
_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")


@dataclass(frozen=True)
class Check:
    """One check: `kind` is one of CHECKS; file checks have `path` (and `text` or
    `pattern`); `unchanged` has `paths`; answer checks have `text` (a pattern for
    answer_matches)."""

    kind: str
    path: str = ""
    text: str = ""
    paths: tuple[str, ...] = ()

    def describe(self) -> str:
        """The check in a few words, for a failure's line."""
        if self.kind == "unchanged":
            return f"unchanged {', '.join(self.paths)}"
        if self.kind in ANSWER_CHECKS:
            return f"{self.kind} {self.text!r}"
        if self.kind in ("file_exists", "file_absent"):
            return f"{self.kind} {self.path}"
        return f"{self.kind} {self.path} {shortened(self.text)!r}"


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Solution:
    calls: tuple[Call, ...]
    answer: str


@dataclass(frozen=True)
class GitSetup:
    """`git`: the files committed first; then `changes` written (None: deleted) and
    `stage` added to the index, so that a task can ask what changed and what is staged."""

    changes: Mapping[str, bytes | None] = field(default_factory=dict)
    stage: tuple[str, ...] = ()


@dataclass(frozen=True)
class During:
    """`during`: after the model's `after_call`-th tool call has run, these files change
    (None: deleted), as when a person edits the project while the model works."""

    after_call: int
    files: Mapping[str, bytes | None]


@dataclass(frozen=True)
class Task:
    id: str
    category: str
    prompt: str
    files: Mapping[str, bytes]
    checks: tuple[Check, ...]
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    git: GitSetup | None = None
    solution: Solution | None = None
    during: tuple[During, ...] = ()
    max_steps: int = DEFAULT_MAX_STEPS
    source: str = ""  # FILE, line N

    @property
    def expects_no_change(self) -> bool:
        """Whether the task's checks hold for a project left as it was and any answer that
        does not give something away: no file is to change and no answer is asked for."""
        asked = {"answer_contains", "answer_matches", *FILE_CHECKS}
        return not any(check.kind in asked for check in self.checks)


def builtin_suite() -> list[Task]:
    """The built-in suite: every cli/evals/suite/*.yaml, in name order."""
    suite = resources.files("cli.evals") / "suite"
    tasks: list[Task] = []
    for entry in sorted(suite.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            tasks += parse_tasks(entry.read_text(encoding="utf-8"), f"suite/{entry.name}")
    _unique(tasks)
    return tasks


def load_tasks(where: str) -> list[Task]:
    """The tasks of a file, or of every *.yaml and *.yml file of a directory (name order)."""
    if not where.strip():
        raise ConfigError("--tasks: give a task file or a directory of them")
    try:
        path = Path(where).expanduser()
    except RuntimeError:  # ~nosuchuser
        raise ConfigError(f"--tasks {where}: no such user's home dir") from None
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise ConfigError(f"--tasks {where}: the directory holds no .yaml task file")
    elif path.is_file():
        files = [path]
    elif path.exists():
        raise ConfigError(f"--tasks {where}: not a regular file or a directory")
    else:
        raise ConfigError(f"--tasks {where}: no such file or directory")
    tasks: list[Task] = []
    for file in files:
        tasks += parse_tasks(_read(file), str(file))
    _unique(tasks)
    return tasks


def _read(path: Path) -> str:
    from cli.fs.stored import Unreadable, read_capped

    try:
        return read_capped(path, MAX_TASK_FILE_BYTES).decode("utf-8")
    except Unreadable as exc:
        raise ConfigError(f"tasks {path}: {exc} (a task file is YAML text)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"tasks {path}: cannot read it: {exc}") from None


def _unique(tasks: Sequence[Task]) -> None:
    seen: dict[str, Task] = {}
    for task in tasks:
        if task.id in seen:
            raise ConfigError(
                f"tasks {task.source}: task '{task.id}' has the id of the task at "
                f"{seen[task.id].source}; give each task its own id"
            )
        seen[task.id] = task


def select(tasks: Sequence[Task], only: str | None) -> list[Task]:
    """`--only ID,…`: those tasks, in the suite's order; an unknown id is an error."""
    if only is None:
        return list(tasks)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    if not wanted:
        raise ConfigError("--only: give task ids, comma-separated; `agent eval --list` shows them")
    known = {task.id for task in tasks}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ConfigError(
            f"--only: no task {', '.join(repr(u) for u in unknown)}; "
            "`agent eval --list` shows the ids"
        )
    return [task for task in tasks if task.id in wanted]


# -- one file ------------------------------------------------------------------------------


def parse_tasks(text: str, source: str) -> list[Task]:
    data, lines = read_yaml(text, source, "tasks", items=True)
    if not isinstance(data, dict) or set(data) != {"tasks"}:
        got = ", ".join(map(str, data)) if isinstance(data, dict) else kind_of(data)
        raise ConfigError(
            f"tasks {source}: the top level must be one key, `tasks:`, a list of tasks; got {got}"
        )
    items = data["tasks"]
    if not isinstance(items, list) or not items:
        got = "an empty list" if items == [] else kind_of(items)
        raise ConfigError(f"tasks {source}: `tasks:` must be a list of tasks, got {got}")
    return [_Reader(source, lines, index).task(item) for index, item in enumerate(items)]


class _Reader:
    """Reads one task, naming the file, the line, the task and the key in every error."""

    def __init__(self, source: str, lines: Mapping[tuple[str, ...], int], index: int) -> None:
        self.source = source
        self.lines = lines
        self.index = index
        self.name = f"task {index + 1}"

    def fail(self, key: tuple[str, ...], message: str) -> ConfigError:
        path = ("tasks", str(self.index), *key)
        line = next(
            (self.lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in self.lines), None
        )
        where = f", line {line}" if line else ""
        what = f" {'.'.join(key)}" if key else ""
        return ConfigError(f"tasks {self.source}{where}: {self.name}{what}: {message}")

    def task(self, item: Any) -> Task:
        if not isinstance(item, dict):
            raise self.fail((), f"a task is a mapping of keys, got {kind_of(item)}")
        task_id = item.get("id")
        if not isinstance(task_id, str) or not _ID.fullmatch(task_id):
            given = "is required" if task_id is None else f"cannot be {kind_of(task_id)}"
            raise self.fail(
                ("id",),
                f"`id` {given}: 1 to 80 lowercase letters, digits, '.', '_' and '-', "
                "the first a letter or digit",
            )
        self.name = f"task '{task_id}'"
        for key in item:
            if key not in TASK_KEYS:
                raise self.fail((str(key),), f"unknown key; a task has: {', '.join(TASK_KEYS)}")
        line = self.lines.get(("tasks", str(self.index)))
        files = self.files(item.get("files"), ("files",))
        return Task(
            id=task_id,
            category=self.word(item, "category"),
            prompt=self.word(item, "prompt"),
            files=files,
            checks=self.checks(item.get("checks")),
            policy=self.policy(item.get("policy")),
            git=self.git(item.get("git"), files),
            solution=self.solution(item.get("solution")),
            during=self.during(item.get("during")),
            max_steps=self.max_steps(item.get("max_steps")),
            source=f"{self.source}, line {line}" if line else self.source,
        )

    def word(self, item: Mapping[str, Any], key: str) -> str:
        value = item.get(key)
        if not isinstance(value, str) or not value.strip():
            given = "is required" if value is None else f"must be text, not {kind_of(value)}"
            raise self.fail((key,), f"`{key}` {given}")
        return value

    def files(self, value: Any, key: tuple[str, ...], *, deletes: bool = False) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping of path to text, got {kind_of(value)}")
        out: dict[str, Any] = {}
        for path, content in value.items():
            where = (*key, str(path))
            self.path(path, where)
            if content is None and deletes:
                out[path] = None
            elif isinstance(content, str):
                out[path] = content.encode("utf-8")
            elif isinstance(content, dict) and set(content) == {"base64"}:
                out[path] = self.base64(content["base64"], where)
            else:
                also = ", or null to delete it" if deletes else ""
                raise self.fail(
                    where, f"expected text or {{base64: …}}{also}; got {kind_of(content)}"
                )
        return out

    def base64(self, value: Any, key: tuple[str, ...]) -> bytes:
        if not isinstance(value, str):
            raise self.fail(key, f"base64: expected a string, got {kind_of(value)}")
        try:
            return base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise self.fail(key, "base64: not valid base64") from None

    def path(self, path: Any, key: tuple[str, ...]) -> str:
        """A path in the project (relative), beside it (`../name`) or in the task's home dir
        (`~/name`): never absolute, never further up, never through `..` elsewhere."""
        if not isinstance(path, str) or not path or "\0" in path or "\\" in path:
            raise self.fail(key, "a path is a non-empty string, with / between names, no NUL")
        rest = path[2:] if path.startswith("~/") else path[3:] if path.startswith("../") else path
        parts = rest.split("/")
        if path.startswith("/") or not rest or any(p in ("", ".", "..") for p in parts):
            raise self.fail(
                key,
                f"path {path!r}: give it relative to the project (`../name` beside it, "
                "`~/name` in the home dir), without . or .. parts",
            )
        if any(part.casefold() == ".git" for part in parts):
            # git reads .git/config (fsmonitor, hooks…) as commands to run: `git: true` makes
            # the repository, and a task never writes in it.
            raise self.fail(key, f"path {path!r}: a task writes nothing in .git; say `git: true`")
        return path

    def checks(self, value: Any) -> tuple[Check, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(("checks",), "`checks` is required: a list of one-key mappings")
        out = []
        for number, item in enumerate(value):
            key = ("checks", str(number))
            if not isinstance(item, dict) or len(item) != 1:
                got = f"{len(item)} keys" if isinstance(item, dict) else kind_of(item)
                raise self.fail(
                    key,
                    f"each check is a mapping of one key, the check, to its argument; got {got}",
                )
            ((kind, arg),) = item.items()
            if kind not in CHECKS:
                raise self.fail(
                    (*key, str(kind)), f"unknown check; the checks are: {', '.join(CHECKS)}"
                )
            out.append(self.check(str(kind), arg, (*key, str(kind))))
        return tuple(out)

    def check(self, kind: str, arg: Any, key: tuple[str, ...]) -> Check:
        if kind in ANSWER_CHECKS:
            if not isinstance(arg, str) or not arg:
                raise self.fail(key, f'{kind} takes the string itself, e.g. `- {kind}: "42"`')
            if kind == "answer_matches":
                self.pattern(arg, key)
            return Check(kind, text=arg)
        if kind == "unchanged":
            if not isinstance(arg, list) or not arg:
                raise self.fail(key, "unchanged takes a list of paths")
            return Check(kind, paths=tuple(self.path(p, key) for p in arg))
        wanted = {"file_matches": {"path", "pattern"}, "file_exists": {"path"}}.get(kind)
        wanted = wanted or ({"path"} if kind == "file_absent" else {"path", "text"})
        if not isinstance(arg, dict) or set(arg) != wanted:
            keys = ", ".join(
                f"{k}: …" for k in sorted(wanted, key=["path", "text", "pattern"].index)
            )
            raise self.fail(key, f"{kind} takes {{{keys}}}")
        path = self.path(arg["path"], key)
        text = arg.get("text", arg.get("pattern", ""))
        if not isinstance(text, str):
            raise self.fail(key, f"{kind}: text and pattern are strings, got {kind_of(text)}")
        if kind == "file_matches":
            self.pattern(text, key)
        return Check(kind, path=path, text=text)

    def pattern(self, pattern: str, key: tuple[str, ...]) -> None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise self.fail(key, f"not a valid regular expression: {exc}") from None

    def policy(self, value: Any) -> PolicyConfig:
        if value is not None and not isinstance(value, dict):
            raise self.fail(("policy",), f"expected a mapping of policy keys, got {kind_of(value)}")
        path = ("tasks", str(self.index), "policy")
        try:
            policy: PolicyConfig = build_section(
                PolicyConfig, value, self.source, path, self.lines, what="tasks"
            )
        except ConfigError as exc:  # "…: tasks.3.policy.confirm: …" as "…: task 'x' policy.confirm"
            prefix = f": tasks.{self.index}.policy"
            raise ConfigError(exc.message.replace(prefix, f": {self.name} policy", 1)) from None
        self.kept_in(policy)
        return policy

    def kept_in(self, policy: PolicyConfig) -> None:
        """A task's policy opens nothing outside its scratch dir: its allowed dirs and the
        trees its commands may read are in it, and its commands run in the sandbox. A task
        file someone sends you cannot make the model reach your files."""
        for name, entries in (
            ("allowed_dirs", policy.allowed_dirs),
            ("commands.read_only", policy.commands.read_only),
        ):
            for entry in entries:
                if not _in_scratch(entry):
                    raise self.fail(
                        ("policy", *name.split(".")),
                        f"{entry!r} is outside the task's scratch dir; a task's dirs are "
                        "`.`, relative paths, `../name` or `~/name`",
                    )
        if policy.commands.sandbox == "off":
            raise self.fail(
                ("policy", "commands", "sandbox"),
                "a task's commands run in the sandbox: leave out `sandbox: off`",
            )

    def git(self, value: Any, files: Mapping[str, bytes]) -> GitSetup | None:
        if value is None or value is False:
            return None
        if value is True:
            return GitSetup()
        if not isinstance(value, dict) or not set(value) <= {"changes", "stage"}:
            raise self.fail(("git",), "expected true, or a mapping with `changes` and `stage`")
        stage = value.get("stage") or []
        if not isinstance(stage, list):
            raise self.fail(("git", "stage"), "expected a list of paths")
        changes = self.files(value.get("changes"), ("git", "changes"), deletes=True)
        named = {*files, *changes}
        for path in stage:
            self.path(path, ("git", "stage"))
            if path not in named or path.startswith(("../", "~/")):
                raise self.fail(
                    ("git", "stage"),
                    f"path {path!r}: stage only the project's own files or changes",
                )
        return GitSetup(changes=changes, stage=tuple(stage))

    def solution(self, value: Any) -> Solution | None:
        if value is None:
            return None
        if not isinstance(value, dict) or not set(value) <= {"calls", "answer"}:
            raise self.fail(
                ("solution",), "expected {calls: [{tool: …, arguments: {…}}, …], answer: …}"
            )
        calls = value.get("calls") or []
        answer = value.get("answer", "")
        if not isinstance(calls, list) or not isinstance(answer, str):
            raise self.fail(("solution",), "calls is a list, answer a string")
        out = []
        for number, call in enumerate(calls):
            key = ("solution", "calls", str(number))
            if not isinstance(call, dict) or not set(call) <= {"tool", "arguments"}:
                raise self.fail(key, "a call is {tool: NAME, arguments: {…}}")
            tool, arguments = call.get("tool"), call.get("arguments") or {}
            if tool not in TOOL_NAMES:
                raise self.fail(
                    key, f"unknown tool {tool!r}; the tools are: {', '.join(TOOL_NAMES)}"
                )
            if not isinstance(arguments, dict):
                raise self.fail(key, f"arguments: expected a mapping, got {kind_of(arguments)}")
            try:  # what a model sends is JSON: no YAML date, set or binary
                json.dumps(arguments, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise self.fail(key, f"arguments: JSON values only (quote it): {exc}") from None
            out.append(Call(tool, arguments))
        return Solution(tuple(out), answer)

    def during(self, value: Any) -> tuple[During, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(("during",), "expected a list of {after_call: N, files: {…}}")
        out = []
        for number, item in enumerate(value):
            key = ("during", str(number))
            if not isinstance(item, dict) or set(item) != {"after_call", "files"}:
                raise self.fail(key, "each is {after_call: N, files: {path: text, …}}")
            after = item["after_call"]
            if not isinstance(after, int) or isinstance(after, bool) or after < 1:
                raise self.fail((*key, "after_call"), "a whole number of at least 1")
            out.append(During(after, self.files(item["files"], (*key, "files"), deletes=True)))
        return tuple(out)

    def max_steps(self, value: Any) -> int:
        if value is None:
            return DEFAULT_MAX_STEPS
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100:
            raise self.fail(("max_steps",), "a whole number from 1 to 100")
        return value


def _in_scratch(entry: str) -> bool:
    """Whether a dir of a task's policy stays in its scratch dir (SCRATCH/run/project is the
    working dir, SCRATCH/run/home the home): `~/…` in the home, a relative path at most one
    level above the project."""
    if entry == "~" or entry.startswith("~/"):
        below = os.path.normpath("run/home/" + entry[2:])
    elif entry.startswith(("/", "~")):  # absolute, or another user's home
        return False
    else:
        below = os.path.normpath("run/project/" + entry)
    return below == "run" or below.startswith("run/")
