"""Commands of one's own: a Markdown file NAME.md in the project's `.metona/commands/` or in
the user's `~/.config/metona-agent/commands/` becomes `/NAME [ARGS]` in chat and `agent run
--command NAME [ARGS…]`.

- The body is the prompt, `$ARGUMENTS` replaced by the arguments as typed and `$1`…`$9` by
  each (split as a shell splits words); a body that names neither gets the arguments after it,
  on a paragraph of their own. `@file` mentions in it are attached as chat attaches them.
- Optional front matter between `---` lines: `description`, `model`, `plan: true`,
  `argument-hint`; any other key is refused, naming the file.
- The project is the git work tree holding the working dir (else the working dir). Its
  command wins over the user's of the same name; both are listed, with their source.
- A project's command is text from the repository, not an instruction of the user's: it is
  read as the project's AGENTS.md is (regular file, no symlink out of the project, no hard
  link, not hidden by the policy, at most MAX_COMMAND_BYTES), whatever it asks for passes the
  same policy, and its first use in a project (and its first use after its text changed) shows
  the text before it is sent (`Seen`).
- A `.metona/` entry that would set hooks is refused: hooks come only from the user's config.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cli.config.shown import ShownOnce
from cli.errors import ConfigError
from cli.loop.instructions import read_project_text, work_tree_root

Source = Literal["project", "user"]

PROJECT_DIR = ".metona"
COMMANDS_DIR = "commands"
MAX_COMMAND_BYTES = 64 * 1024
MAX_COMMANDS = 200  # files looked at in each commands dir
# The chat's own commands (cli/ui/chat_commands.py COMMANDS, which a test compares with this): a
# command file of one of these names is refused, in chat and in `agent run --command` alike.
BUILTIN_NAMES = (
    "help",
    "exit",
    "bye",
    "clear",
    "model",
    "models",
    "tools",
    "mcp",
    "think",
    "save",
    "load",
    "turns",
    "diff",
    "retry",
    "edit",
    "compact",
    "history",
    "undo",
    "redo",
    "plan",
    "go",
)
FRONT_MATTER_KEYS = ("description", "model", "plan", "argument-hint")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_PLACEHOLDER = re.compile(r"\$ARGUMENTS|\$([1-9])")


@dataclass(frozen=True)
class CustomCommand:
    name: str  # as typed after the slash, lower case
    source: Source
    path: str
    body: str
    description: str = ""
    model: str = ""
    plan: bool = False
    argument_hint: str = ""

    @property
    def digest(self) -> str:
        """What is shown at first use, hashed: the body and every front matter setting (a
        changed `model:` or a dropped `plan: true` is shown again)."""
        shown = "\0".join((self.body, self.model, str(self.plan), self.description))
        return hashlib.sha256(shown.encode("utf-8", "surrogatepass")).hexdigest()

    def settings(self) -> list[str]:
        """The front matter settings that change how it is sent, as lines to show."""
        said = [f"model: {self.model}"] if self.model else []
        return said + (["plan: true (sent in plan mode)"] if self.plan else [])

    def expand(self, arguments: str, words: Sequence[str] | None = None) -> str:
        """The prompt: the body with `$ARGUMENTS` and `$1`…`$9` replaced. `words`: the
        arguments one by one (`agent run`'s argv); else `arguments` split as a shell would."""
        arguments = arguments.strip()
        if words is None:
            try:
                words = shlex.split(arguments)
            except ValueError:  # an unclosed quote: words as spaces separate them
                words = arguments.split()
        named = _PLACEHOLDER.search(self.body) is not None

        def placed(match: re.Match[str]) -> str:
            if match.group(1) is None:
                return arguments
            index = int(match.group(1)) - 1
            return words[index] if index < len(words) else ""

        # One pass over the body: what the arguments say is put in as it is (a `$1` typed in
        # them stays `$1`).
        text = _PLACEHOLDER.sub(placed, self.body)
        if arguments and not named:
            text = f"{text}\n\n{arguments}"
        return text.strip()


@dataclass
class Catalogue:
    """The commands found, by name; the one-line notes on the files refused; and the user's
    commands a project's of the same name overrides (listed, not used)."""

    commands: dict[str, CustomCommand] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    overridden: list[CustomCommand] = field(default_factory=list)
    project: str = ""  # the project's root

    def get(self, name: str) -> CustomCommand | None:
        return self.commands.get(name.lower())


def project_root(cwd: str) -> str:
    """The project: the git work tree holding `cwd`, else `cwd`."""
    real = os.path.realpath(cwd)
    return work_tree_root(real) or real


def load_commands(
    cwd: str,
    config_dir: str,
    hides: Callable[[str], bool],
    builtin: Collection[str] = BUILTIN_NAMES,
) -> Catalogue:
    """The user's and the project's commands (the project's win)."""
    root = project_root(cwd)
    catalogue = Catalogue(project=root)
    user = _from_dir(os.path.join(config_dir, COMMANDS_DIR), "user", hides, None, builtin)
    project = _from_dir(
        os.path.join(root, PROJECT_DIR, COMMANDS_DIR), "project", hides, root, builtin
    )
    for found, notes in (user, project):
        catalogue.notes += notes
        for command in found:
            earlier = catalogue.commands.get(command.name)
            if earlier is not None:
                catalogue.overridden.append(earlier)
            catalogue.commands[command.name] = command
    return catalogue


def _from_dir(
    directory: str,
    source: Source,
    hides: Callable[[str], bool],
    inside: str | None,
    builtin: Collection[str],
) -> tuple[list[CustomCommand], list[str]]:
    try:
        with os.scandir(directory) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".md"))[:MAX_COMMANDS]
    except OSError:
        return [], []
    commands: list[CustomCommand] = []
    notes: list[str] = []
    taken: set[str] = set()
    for file_name in names:
        path = os.path.join(directory, file_name)
        stem = file_name[: -len(".md")]
        shown = _shown(path)
        if not _NAME.fullmatch(stem):
            notes.append(f"{shown}: not a command name (letters, digits, '-' and '_'): refused")
            continue
        name = stem.lower()
        if name in builtin:
            notes.append(f"{shown}: /{name} is a built-in command: refused (rename the file)")
            continue
        if name in taken:
            notes.append(f"{shown}: /{name} is defined twice here (names ignore case): refused")
            continue
        try:
            command = _read(path, name, source, hides, inside)
        except (ConfigError, ValueError) as exc:
            notes.append(f"{shown}: {exc}")
            continue
        taken.add(name)
        commands.append(command)
    return commands, notes


def _read(
    path: str, name: str, source: Source, hides: Callable[[str], bool], inside: str | None
) -> CustomCommand:
    text = read_project_text(path, _shown(path), inside, hides, MAX_COMMAND_BYTES)
    meta, body = front_matter(text, _shown(path))
    if not body.strip():
        raise ValueError("its body is empty: the body is the prompt it sends")
    return CustomCommand(
        name,
        source,
        path,
        body.strip(),
        description=meta.get("description", ""),
        model=meta.get("model", ""),
        plan=meta.get("plan", False),
        argument_hint=meta.get("argument-hint", ""),
    )


def front_matter(text: str, shown: str) -> tuple[dict[str, Any], str]:
    """The front matter (checked) and the body. Raises ValueError (one line, naming the
    file's key or line) for a malformed one."""
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ValueError("malformed front matter: no closing '---' line") from None
    from cli.config.settings import kind_of, read_yaml

    try:
        data, _ = read_yaml("\n".join(lines[1:end]), shown, "front matter")
    except ConfigError as exc:
        raise ValueError(f"malformed front matter: {exc.message}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"malformed front matter: expected keys, got {kind_of(data)}")
    meta: dict[str, Any] = {}
    for key, value in data.items():
        if key not in FRONT_MATTER_KEYS:
            known = ", ".join(FRONT_MATTER_KEYS)
            raise ValueError(f"malformed front matter: unknown key {key!r} (known: {known})")
        if key == "plan" and not isinstance(value, bool):
            raise ValueError(
                f"malformed front matter: plan: expected true or false, got {kind_of(value)}"
            )
        if key != "plan" and not isinstance(value, str):
            raise ValueError(
                f"malformed front matter: {key}: expected a string, got {kind_of(value)}"
            )
        meta[str(key)] = value
    return meta, "\n".join(lines[end + 1 :])


def _shown(path: str) -> str:
    home = os.path.expanduser("~")
    return (
        "~" + path[len(home) :] if home not in ("", "/") and path.startswith(home + "/") else path
    )


# -- first use of a project's command ------------------------------------------------------


class Seen:
    """Which project commands, with which text, were shown in which project (cli/config/
    shown.py: an empty file per (project, name, text) under the state dir)."""

    def __init__(self, directory: Path) -> None:
        self.marks = ShownOnce(directory)

    @staticmethod
    def _key(project: str, command: CustomCommand) -> str:
        return "\0".join((project, command.name, command.digest))

    def needs_showing(self, project: str, command: CustomCommand) -> bool:
        return command.source == "project" and not self.marks.shown(self._key(project, command))

    def mark(self, project: str, command: CustomCommand) -> None:
        self.marks.mark(self._key(project, command))


# -- hooks a project would set --------------------------------------------------------------

_SETTINGS_FILES = ("config.yaml", "config.yml", "settings.json", "settings.yaml", "settings.yml")


def project_hooks(cwd: str) -> list[str]:
    """One line for each thing under the project's `.metona/` that would set a hook: an
    entry named hooks (hooks.yaml, hooks.json, hooks/…) or a settings file with a `hooks`
    key. Nothing there is read as a hook; the line says so."""
    directory = os.path.join(project_root(cwd), PROJECT_DIR)
    try:
        with os.scandir(directory) as entries:
            names = sorted(e.name for e in entries)[:MAX_COMMANDS]
    except OSError:
        return []
    lines = []
    for name in names:
        path = os.path.join(directory, name)
        if name.lower().split(".")[0] == "hooks" or (
            name.lower() in _SETTINGS_FILES and _has_hooks_key(path)
        ):
            lines.append(
                f"{_shown(path)}: a project cannot set hooks; refused (hooks come only from your "
                "own config: hooks in ~/.config/metona-agent/config.yaml, or the file -c names)"
            )
    return lines


def _has_hooks_key(path: str) -> bool:
    """Does the file (at most MAX_COMMAND_BYTES of it) name a `hooks` key: at the start of a
    line, or as a JSON key after `{` or `,`. Read as text, never parsed as config: a false
    alarm costs one line, and nothing of it is used either way."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)  # a FIFO opens without waiting for a writer; no link
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False  # a FIFO, a device: never read (it could block or eat input)
        data = os.read(fd, MAX_COMMAND_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    finally:
        os.close(fd)
    return re.search(r'(?m)(?:^|[{,])\s*["\']?hooks["\']?\s*:', data) is not None


def listed(catalogue: Catalogue) -> Iterable[tuple[str, str, str]]:
    """(usage, source, description) of each command, and of each the project overrides."""
    for command in catalogue.commands.values():
        hint = f" {command.argument_hint}" if command.argument_hint else " [ARGS]"
        yield f"/{command.name}{hint}", command.source, command.description
    for command in catalogue.overridden:
        yield f"/{command.name}", "user, overridden by the project's", command.description
