"""decide(tool, arguments) → allow | ask | deny, with the reason and the rule that decided.

Pure but for three looks at the file system: resolving symlinks, counting hard links, and,
for a file with hard links, whether it is a secret under another name (cli/safety/secret_files.py).
The order of the rules is a contract (docs/configuration.md): unknown/disabled tool → blocked or
sensitive path (a secret by name, or by identity: a hard link to one) → outside the allowed
dirs → hard link, protected file → command rules → the tool's setting.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cli.config.settings import (
    APP_NAME,
    READ_TOOLS,
    TOOL_NAMES,
    WRITE_TOOLS,
    PolicyConfig,
    is_mcp_name,
)
from cli.fs.folding import Places, on_disk
from cli.fs.paths import PathError, ResolvedPath, expand_user, is_within, resolve_path, root_of
from cli.safety import dot_entries, path_classes
from cli.safety.secret_files import SecretFiles
from cli.safety.shell_line import matches_allow

Action = Literal["allow", "ask", "deny"]

# Which arguments of each tool are paths. run_command's `cwd` defaults to the working dir.
PATH_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "read_file": ("path",),
    "edit_file": ("path",),
    "write_file": ("path",),
    "list_directory": ("path",),
    "search_files": ("path",),
    "create_directory": ("path",),
    "move_file": ("source", "destination"),
    "delete_file": ("path",),
    "run_command": ("cwd",),
    "git_status": ("path",),
    "git_diff": ("path",),
}
# These change things, so they are held to the allowed dirs; reads outside only ask.
_CONFINED = WRITE_TOOLS | {"run_command"}
# These open a file's content, so a file with other names (hard links) must be asked about.
_CONTENT_TOOLS = frozenset({"read_file", "write_file", "edit_file"})
_STRICTER = ("allow", "ask", "deny")  # each setting is stricter than the ones before it


def mcp_rule(rules: Collection[str], name: str) -> str | None:
    """Which of `rules` (policy.tools keys, policy.unattended items) speaks for the MCP tool
    `name` (mcp__<server>__<tool>): `name` itself, else the longest `*` pattern that
    matches it; None if none does."""
    if name in rules:
        return name
    patterns = [p for p in rules if is_mcp_name(p) and ("*" in p or "?" in p or "[" in p)]
    for pattern in sorted(patterns, key=len, reverse=True):
        if fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    rule: str  # which rule decided: a stable word for logs, tests and the audit trail
    outside_allowed: bool = False  # --yes never approves these
    paths: Mapping[str, ResolvedPath] = field(default_factory=dict)
    # Only a person may say yes: not --yes, not an earlier "always" (protected files, the
    # agent's own config, files with hard links, commands matching the deny list).
    needs_human: bool = False
    warnings: tuple[str, ...] = ()  # shown in the confirmation
    hint: str = ""  # for the model only, when refused: what it could do instead
    # An MCP tool: mcp__<server>__<tool> with the tool as its server listed it (the name the
    # model was offered may be cut, cleaned or made unique): what rules are matched against.
    mcp_name: str = ""

    @property
    def standing_yes_ok(self) -> bool:
        """May a yes given beforehand (--yes, an "always" answer) cover this ask? Never for
        a path outside the allowed dirs (that would widen what is reachable), never for what
        needs a person."""
        return not self.outside_allowed and not self.needs_human


def shorten_name(name: str, limit: int = 120) -> str:
    """A name a server gave, cut for a message (it may be any length)."""
    return name if len(name) <= limit else f"{name[: limit - 1]}…"


def _linked_dot_targets(home: str, xdg_homes: Sequence[str] = ()) -> list[str]:
    """Where the home's dot-entries that are symlinks lead (a dotfiles repo: `~/.bashrc ->
    ~/dotfiles/bashrc`, `~/.config/nvim -> ~/dotfiles/nvim`): what is written there
    configures a program as the dot-entry does, so it is an execution surface. The home's
    dot-entries and one level into ~/.config, ~/.local/share and the XDG dirs; never `/`,
    the home or a dir holding it (a link to those protects nothing it can name)."""
    places = [(home, True), (os.path.join(home, ".config"), False)]
    places += [(os.path.join(home, ".local", "share"), False)]
    places += [(d, False) for d in xdg_homes]
    out: list[str] = []
    for directory, dots_only in places:
        try:
            with os.scandir(directory) as entries:
                links = [
                    e.path
                    for e in itertools.islice(entries, _MAX_HOME_ENTRIES)
                    if (not dots_only or e.name.startswith(".")) and e.is_symlink()
                ]
        except OSError:
            continue
        for link in links:
            target = os.path.realpath(link)
            if target != "/" and not is_within(home, target):
                out.append(target)
    return list(dict.fromkeys(out))


# How many entries of the home (and ~/.config…) are looked at for linked dot-entries.
_MAX_HOME_ENTRIES = 10_000


def _xdg_homes(home: str, xdg: Mapping[str, str] | None) -> tuple[str, ...]:
    """The dirs the XDG_*_HOME variables in `xdg` name outside `home`, as written and as the
    disk spells them."""
    return tuple(
        dict.fromkeys(
            spelled
            for var, _ in path_classes.XDG_DIRS
            if os.path.isabs(value := (xdg or {}).get(var, "")) and not is_within(home, value)
            for spelled in (os.path.normpath(value), on_disk(os.path.normpath(value)))
        )
    )


class Policy:
    """The user's YAML policy, with every directory resolved once at start."""

    def __init__(
        self,
        config: PolicyConfig,
        cwd: str,
        home: str,
        config_path: str | None = None,
        private_dirs: Sequence[str] = (),
        config_dirs: Sequence[str] | None = None,
        path_var: str = "",
        xdg: Mapping[str, str] | None = None,
        code_dirs: Sequence[str] = (),
    ) -> None:
        """`config_path`: the config file this policy came from, if any. `config_dirs`: every
        dir a config would be loaded from, existing or not (default ~/.config/metona-agent);
        writes to either always need a person. `private_dirs`: the agent's own state (audit
        log, backups, trash, sessions), blocked like blocked_dirs so that no tool, and so no
        model, can rewrite the record of what it did or plant a backup for `agent undo`.
        `path_var`: $PATH, whose dirs under the home dir are execution surfaces. `xdg`: the
        XDG_*_HOME variables, which move ~/.config and friends (and so git's, systemd's…
        files) elsewhere. `code_dirs`: where the agent's own code is imported from, which are
        execution surfaces (wiring.own_code_dirs)."""
        self.config = config
        self.home = home
        # The MCP servers' tools offered now, by our name → mcp__<server>__<tool> with the tool
        # as its server listed it (Agent.mcp_tools sets it).
        self.mcp_tools: Mapping[str, str] = {}
        # Every dir below is spelled as the disk holds it (on_disk), as resolve_path spells
        # the paths compared with them: on a case-insensitive disk `~/Work` is `~/work`.
        self.cwd = on_disk(os.path.realpath(cwd))
        self.allowed_dirs = tuple(
            dict.fromkeys(self._real(d) for d in config.allowed_dirs if d.strip())
        )
        # A blocked dir is checked both as written and with its symlinks resolved, so that
        # neither /etc nor the /private/etc it may point to slips through; where its disk
        # ignores case, with case and normalisation folded too (cli/fs/folding.py Places).
        self._blocked = Places(self._both_spellings((*config.blocked_dirs, *private_dirs)))
        self.blocked_dirs = self._blocked.dirs
        self.command_deny = tuple(re.compile(p, re.IGNORECASE) for p in config.commands.deny)
        # Both the file and, if the path given is a symlink, the link: deleting the link would
        # drop the config just as well.
        self.config_files = self._config_files(config_path)
        if config_dirs is None:
            config_dirs = [os.path.join(home, ".config", APP_NAME)]
        agent_paths = [*self.config_files]
        for d in config_dirs:
            agent_paths += [os.path.normpath(self._absolute(d)), self._real(d)]
        # The dirs XDG_CONFIG_HOME and friends name: programs keep their configuration there
        # as under a dot-entry of the home (`dot_entry`), whatever the dir is called.
        self.xdg_homes = _xdg_homes(home, xdg)
        linked = [path_classes.literal(p) for p in _linked_dot_targets(home, self.xdg_homes)]
        # What the lists below were built from beside the config, kept so that
        # cli/safety/sources.py can say which entry a decision matched (nothing decides by them).
        self.path_var = path_var
        self.code_dirs = tuple(code_dirs)
        self.linked_dot_entries = tuple(linked)
        self.xdg_env = {var: (xdg or {}).get(var, "") for var, _ in path_classes.XDG_DIRS}
        self.classes = path_classes.build(
            home,
            config.secrets,
            (*config.execution_surfaces, *linked),
            config.sensitive_patterns,
            config.protected_patterns,
            path_var,
            agent_paths,
            xdg,
            code_dirs,
        )
        self.plain_dotfiles = dot_entries.PlainNames(config.plain_dotfiles)
        self._secret_files: SecretFiles | None = None  # built at the first hard link met

    def _both_spellings(self, dirs: Sequence[str]) -> list[str]:
        """Each dir but the blank ones, as written (made absolute) and with its symlinks
        resolved."""
        spelled: list[str] = []
        for d in dirs:
            if d.strip():
                spelled += [os.path.normpath(self._absolute(d)), self._real(d)]
        return spelled

    def _config_files(self, config_path: str | None) -> tuple[str, ...]:
        """The config file as the disk spells it, with its symlinks resolved, and the entry
        the path given names (the link, if it is one); none without a config file."""
        if not config_path:
            return ()
        absolute = os.path.normpath(self._absolute(config_path))
        parent, name = os.path.split(absolute)
        entry = os.path.join(os.path.realpath(parent), name)
        return tuple(dict.fromkeys((on_disk(os.path.realpath(absolute)), on_disk(entry))))

    # -- settings -------------------------------------------------------------------------

    def setting(self, tool: str) -> Action:
        """The tool's own setting before any path or command rule: `tools` if set, else what
        `confirm` implies; delete_file never goes below "ask" unless `tools` says allow.
        An MCP tool: its own key in `tools`, else the longest `*` pattern that matches it
        (`mcp__git__*`), else ask — whatever `confirm` says."""
        if is_mcp_name(tool):
            return self._mcp_setting(tool)
        explicit = self.config.tools.get(tool)
        if explicit in ("allow", "ask", "deny"):
            return explicit  # type: ignore[return-value]
        if tool == "run_command":
            return "deny"  # high risk: off until the YAML turns it on
        if tool == "delete_file":
            return "ask"
        if self.config.confirm == "all":
            return "ask"
        if self.config.confirm == "none":
            return "allow"
        return "allow" if tool in READ_TOOLS else "ask"

    def enabled_tools(self) -> list[str]:
        """The tools offered to the model: those whose setting is not deny (the MCP servers'
        tools after ours)."""
        names = [*TOOL_NAMES, *self.mcp_tools]
        return [t for t in names if self.setting(t) != "deny"]

    def _mcp_setting(self, tool: str) -> Action:
        """Judged by the name the tool's server listed it by, never only by ours: a rule for
        `mcp__evil__t` reaches every tool evil lists as `t`, whatever we had to call it. Our
        name counts only where its rule is stricter (a rule written for a name a card showed
        still denies; it never lets run what the server's own name would not)."""
        listed = self.mcp_tools.get(tool, tool)
        setting = self._mcp_rule_setting(listed)
        if listed != tool:
            setting = max(setting, self._mcp_rule_setting(tool), key=_STRICTER.index)
        return setting

    def _mcp_rule_setting(self, name: str) -> Action:
        rule = mcp_rule(self.config.tools, name)
        action = self.config.tools.get(rule) if rule is not None else None
        return action if action in ("allow", "ask", "deny") else "ask"  # type: ignore[return-value]

    # -- decisions ------------------------------------------------------------------------

    def decide(self, tool: str, arguments: Mapping[str, Any]) -> Decision:
        if tool in self.mcp_tools:
            return self._mcp_decision(tool)
        if tool not in TOOL_NAMES:
            valid = ", ".join(self.enabled_tools()) or "none"
            return Decision(
                "deny", f"unknown tool '{tool}'", "unknown_tool", hint=f"valid tools: {valid}"
            )
        setting = self.setting(tool)
        if setting == "deny":
            return Decision(
                "deny", f"tool '{tool}' is not enabled in this agent's policy", "disabled"
            )
        paths: dict[str, ResolvedPath] = {}
        for name in PATH_ARGUMENTS[tool]:
            raw = arguments.get(name)
            if raw is None and name == "cwd":
                raw = self.cwd
            if raw is None:
                continue
            try:
                paths[name] = resolve_path(str(raw), self.cwd, self.home)
            except PathError as exc:
                return Decision("deny", str(exc), "bad_path")
        for resolved in paths.values():
            denial = self._path_denial(resolved)
            if denial:
                return Decision("deny", denial[0], denial[1], paths=paths)
        outside = [p for p in paths.values() if not self.is_allowed(p)]
        if outside:
            return self._outside_decision(tool, outside[0], paths)
        if tool in ("delete_file", "move_file"):
            gone = paths.get("path") or paths.get("source")
            root = next((d for d in self.allowed_dirs if gone and gone.entry == d), None)
            if root:
                verb = "deleted" if tool == "delete_file" else "moved"
                return Decision(
                    "deny",
                    f"{root} is an allowed directory itself; it cannot be {verb}",
                    "allowed_root",
                    paths=paths,
                )
        caution = self._caution(tool, paths)
        if caution:
            return Decision("ask", caution[0], caution[1], paths=paths, needs_human=True)
        if tool == "run_command":
            return self._command_decision(str(arguments.get("command", "")), setting, paths)
        if setting == "allow":
            return Decision("allow", "allowed by policy", "setting", paths=paths)
        return Decision("ask", self._ask_reason(tool), "setting", paths=paths)

    def _mcp_decision(self, tool: str) -> Decision:
        """An MCP tool's arguments are the server's business: no path in them is read as
        one (the card says so), only the tool's setting decides."""
        setting = self.setting(tool)
        listed = self.mcp_tools.get(tool, tool)
        named = (
            tool if listed == tool else f"{tool} ({shorten_name(listed)} as its server lists it)"
        )
        if setting == "deny":
            return Decision(
                "deny",
                f"tool '{named}' is not enabled in this agent's policy",
                "disabled",
                mcp_name=listed,
            )
        if setting == "allow":
            return Decision("allow", f"policy.tools allows {named}", "setting", mcp_name=listed)
        return Decision(
            "ask", "MCP tools are confirmed unless policy.tools allows them", "mcp", mcp_name=listed
        )

    def is_allowed(self, path: ResolvedPath) -> bool:
        """Inside an allowed dir both where the data is (symlinks resolved) and where the
        directory entry is (what a create or delete touches). The textual form does not
        count: a link from elsewhere into an allowed dir reaches only allowed data."""
        return all(
            any(is_within(form, d) for d in self.allowed_dirs) for form in (path.real, path.entry)
        )

    def root_of(self, path: str) -> str | None:
        """The allowed dir holding `path` (the innermost), or None: what a file operation is
        anchored to (ToolContext.roots carries the same dirs to the tools)."""
        return root_of(path, self.allowed_dirs)

    def protection(self, path: ResolvedPath, tool: str) -> str | None:
        """Why a write to `path` needs a person, or None. Such a write could loosen this
        agent's own policy or plant code that runs later: the agent's config (every place
        one would be loaded from), the execution surfaces of cli/safety/sensitive.py — git's
        control files, shell start-up files, $PATH dirs, units, CI configs… — and every
        dot-entry (`dot_entry`). Copilot CVE-2025-53773 and Cursor CVE-2025-54135/54136
        were agents writing such files."""
        agent = self.classes.agent_config
        if any(agent.match(form) for form in path.forms):
            return "this agent's own config"
        # A recursive delete of a directory holding the config removes it too.
        if tool in ("delete_file", "move_file") and any(
            is_within(p, path.entry) for p in self.classes.agent_paths
        ):
            return "a directory holding this agent's own config"
        surfaces = self.classes.surfaces
        if any(surfaces.match(form) for form in (path.given, *path.forms)):
            return "an execution surface (its content makes code run later)"
        for form in path.forms:
            dot = self.dot_entry(form)
            if dot:
                return dot
        return None

    def dot_entry(self, path: str) -> str | None:
        """Why `path` (absolute) counts as a program's configuration by its dot-entries, or
        None. Allow lists beat deny lists: no list of the files that make a program run code
        is complete (`.pdbrc`, `~/.lesskey`, `.iex.exs`…), so anything under a dot-entry of
        the home dir configures a program whatever the allowed dirs, and so does any path
        with a dot-entry below its allowed dir, but for a plain-data file name
        (dot_entries.PLAIN_DOTFILES, policy.plain_dotfiles) as its last component."""
        home_entry = dot_entries.home_dot_entry(path, self.classes.secrets.homes)
        if home_entry:
            return f"under {home_entry}, a dot-entry of the home dir, which configures a program"
        xdg = next((d for d in self.xdg_homes if is_within(path, d)), None)
        if xdg:
            return f"under {xdg}, an XDG base dir of the home, which configures a program"
        root = self.root_of(path)
        part = dot_entries.dot_component(path, root, self.plain_dotfiles) if root else None
        if part is None:
            return None
        where = "a dot-entry" if path.endswith("/" + part) else f"inside the dot-entry {part}"
        return f"{where}, which may configure a program"

    def configures(self, path: str) -> bool:
        """Would a change at `path` (absolute, as it is or would be named) need a person as
        a protected path does: an execution surface, this agent's config, a dot-entry. The
        one test for every entry of a tree that moves (move_file, and undo moving it back)."""
        classes = self.classes
        if classes.surfaces.match(path) or classes.agent_config.match(path):
            return True
        return self.dot_entry(path) is not None

    def is_sensitive(self, path: str) -> bool:
        """A secret (cli/safety/sensitive.py SECRETS, policy.secrets, policy.sensitive_patterns)."""
        return self.classes.secrets.match(path)

    def secret_of(self, device: int, inode: int) -> str | None:
        """The secret with a place of its own (`~/.ssh/id_rsa`…) that the file (device,
        inode) is under another name — a hard link to it — or None (cli/safety/secret_files.py)."""
        if self._secret_files is None:
            self._secret_files = SecretFiles(self.classes.secrets.anchored_paths())
        return self._secret_files.find(device, inode)

    def blocked_dir(self, path: str) -> str | None:
        return self._blocked.holding(path)

    def hides(self, path: str) -> bool:
        """True for paths a walk (search, listing) must not open: blocked or sensitive."""
        return self.blocked_dir(path) is not None or self.is_sensitive(path)

    def hides_entry(self, path: str) -> bool:
        """`hides` for an entry of a walk whose directory is known not to be hidden (so none
        of its ancestors is): it is then inside a blocked dir only by being one, and a secret
        only by a match that ends at its own name. The same answer as `hides` at a set lookup
        and one anchored regex per entry, instead of a containment check per blocked dir and
        a regex per path component (tests/safety/test_policy.py compares the two)."""
        return self._blocked.has(path) or self.classes.secrets.match_entry(path)

    # -- helpers --------------------------------------------------------------------------

    def _path_denial(self, path: ResolvedPath) -> tuple[str, str] | None:
        for form in path.forms:
            blocked = self.blocked_dir(form)
            if blocked:
                return (f"{path.given} is inside the blocked directory {blocked}", "blocked_dir")
        for form in (path.given, *path.forms):
            if self.is_sensitive(form):
                return (
                    f"{path.given} looks like a secret (a credential or key file); "
                    "it is never read, searched or written",
                    "sensitive",
                )
        file = path.file
        secret = self.secret_of(file.device, file.inode) if file and file.links > 1 else None
        if secret:
            return (
                f"{path.given} is {secret} under another name (a hard link to it), a secret; "
                "it is never read, searched or written",
                "sensitive",
            )
        return None

    def _outside_decision(
        self, tool: str, where: ResolvedPath, paths: dict[str, ResolvedPath]
    ) -> Decision:
        allowed = self._allowed_text()
        if tool in _CONFINED:
            return Decision(
                "deny",
                f"{where.real} is outside the allowed directories ({allowed}); "
                f"{tool} may only change things inside them",
                "outside_allowed",
                outside_allowed=True,
                paths=paths,
            )
        return Decision(
            "ask",
            f"{where.real} is outside the allowed directories ({allowed})",
            "outside_allowed",
            outside_allowed=True,
            paths=paths,
        )

    def _caution(self, tool: str, paths: Mapping[str, ResolvedPath]) -> tuple[str, str] | None:
        """Why only a person may approve this call (reason, rule), or None."""
        for path in paths.values():
            if tool in _CONTENT_TOOLS and path.file is not None and path.file.links > 1:
                return (
                    f"{path.given} has {path.file.links - 1} other name(s) (hard links), which "
                    "may be outside the allowed directories: its content is shared with them",
                    "hard_link",
                )
            what = self.protection(path, tool) if tool in WRITE_TOOLS else None
            if what and "dot-entry" in what:
                plain = "" if "home dir" in what else "; policy.plain_dotfiles names plain data"
                return (
                    f"{path.given} is {what}: a person must confirm (the 'always' answer, "
                    f"--yes and tools: allow do not cover it{plain})",
                    "protected",
                )
            if what:
                return (
                    f"{path.given} is {what}: writing it can loosen this agent's policy or "
                    "plant code that runs later, so a person must confirm",
                    "protected",
                )
        return None

    def _command_decision(
        self, command: str, setting: Action, paths: dict[str, ResolvedPath]
    ) -> Decision:
        # The deny list is a warning, not a wall: a substring list is bypassed by quoting,
        # variables and a hundred other spellings (docs/safety.md); the sandbox is the wall.
        # A match still always needs a person to say yes.
        flat = " ".join(command.split())
        warnings = tuple(
            f"matches the deny pattern {p.pattern!r}" for p in self.command_deny if p.search(flat)
        )
        if warnings:
            return Decision(
                "ask",
                "the command matches policy.commands.deny",
                "command_deny",
                paths=paths,
                needs_human=True,
                warnings=warnings,
            )
        if setting == "allow":
            return Decision("allow", "run_command is set to allow", "setting", paths=paths)
        if matches_allow(command, self.config.commands.allow):
            return Decision(
                "allow", "every part matches policy.commands.allow", "command_allow", paths=paths
            )
        return Decision("ask", "every command is confirmed", "setting", paths=paths)

    def _ask_reason(self, tool: str) -> str:
        if tool == "delete_file" and self.config.tools.get(tool) is None:
            return "deletes are always confirmed"
        if self.config.tools.get(tool) == "ask":
            return f"policy.tools.{tool} is ask"
        return f"policy.confirm is {self.config.confirm}"

    def _allowed_text(self) -> str:
        return ", ".join(self.allowed_dirs) or "none"

    def _absolute(self, path: str) -> str:
        return os.path.join(self.cwd, expand_user(path, self.home))

    def _real(self, path: str) -> str:
        return on_disk(os.path.realpath(self._absolute(path)))


def whole_trees(policy: Policy) -> list[str]:
    """The allowed dirs that hand the model a whole tree a person rarely means to: the file
    system's root, or the home directory (chat and run started there), each as a phrase."""
    home = on_disk(os.path.realpath(policy.home)) if policy.home else ""
    found: list[str] = []
    for d in policy.allowed_dirs:
        if d == os.path.dirname(d):
            found.append(f"the whole file system ({d})")
        elif home and d == home:
            found.append(f"your home directory ({d})")
    return found
