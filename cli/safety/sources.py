"""Which entry a policy decision matched: the built-in list entry, the config key (and its
item), the dot-entry or the allowed dir behind the rule a `Decision` already names.

Nothing here decides anything: `Policy.decide` (through cli/loop/decision.py) made the
decision, and this re-derives only where its rule came from, with the policy's own matchers
(one `PathClass` per entry of the same lists, `Places` per blocked dir, the allow-prefix
test prefix by prefix), for `agent policy explain`. Pure but for the looks the policy
itself takes (resolving a blocked dir as written). Config keys are named by their path; the
caller turns that into the file and line (cli/config/view.py `set_at`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cli.config.settings import WRITE_TOOLS, is_mcp_name
from cli.fs.folding import Places
from cli.fs.paths import ResolvedPath, is_within
from cli.safety import dot_entries, path_classes, sensitive
from cli.safety.policy import Decision, Policy, mcp_rule
from cli.safety.shell_line import allowing_prefixes

# What kind of thing a rule came from.
BUILT_IN = "built-in"  # a list or default in the code (cli/safety/sensitive.py, policy.py)
CONFIG = "config"  # a config key (its file and line when the file sets it, else its default)
DOT_ENTRY = "dot-entry"  # a name starting with a dot, which configures a program
ALLOWED_DIR = "allowed-dir"  # policy.allowed_dirs, as resolved
ENVIRONMENT = "environment"  # $PATH, the XDG variables
FILE = "file"  # the file itself (its hard links), the config file in force
STAGE = "stage"  # a stage of cli/loop/decision.py after the policy


@dataclass(frozen=True)
class Source:
    """One entry behind a rule: what it is, in words, and where it is written."""

    kind: str
    what: str  # a phrase: "the built-in secrets list (cli/safety/sensitive.py SECRETS)"
    entry: str = ""  # the entry as written: a glob, a regex, a dir, a prefix, a key: value
    key: tuple[str, ...] = ()  # the config key it is, or whose default it is
    index: int | None = None  # its item in that key's list


def sources(
    policy: Policy, tool: str, arguments: Mapping[str, Any], decision: Decision
) -> list[Source]:
    """The entries behind `decision.rule` for this call ([] for a rule of a later stage,
    which the caller names). `decision` must be what the policy, or a stage after it, gave
    for exactly this call."""
    rule = decision.rule
    paths = decision.paths
    if rule == "blocked_dir":
        return _first(_blocked(policy, p) for p in paths.values())
    if rule == "sensitive":
        return _first(_secret(policy, p) for p in paths.values())
    if rule == "outside_allowed":
        return [_allowed_dirs(policy)]
    if rule == "allowed_root":
        gone = paths.get("path") or paths.get("source")
        return [_allowed_dir(policy, gone.entry)] if gone else []
    if rule == "hard_link":
        return _first(_hard_link(p) for p in paths.values())
    if rule == "protected":
        return _first(_protected(policy, tool, p) for p in paths.values())
    if rule == "command_deny":
        return _deny_patterns(policy, str(arguments.get("command", "")))
    if rule == "command_allow":
        return _allow_prefixes(policy, str(arguments.get("command", "")))
    if rule in ("setting", "disabled", "mcp"):
        return [setting_source(policy, tool)]
    if rule == "unknown_tool":
        return [Source(BUILT_IN, "the tools this agent has (and the MCP servers' tools)")]
    if rule == "bad_path":
        return [Source(BUILT_IN, "what a path may be (cli/fs/paths.py)")]
    if rule == "schema":
        return [Source(BUILT_IN, "the tool's schema: its arguments and their types")]
    return []


def setting_source(policy: Policy, tool: str) -> Source:
    """Where the tool's own setting (`Policy.setting`) comes from."""
    config = policy.config
    if is_mcp_name(tool):
        listed = policy.mcp_tools.get(tool, tool)
        rule = mcp_rule(config.tools, listed)
        if rule is not None:
            return _tools_key(policy, rule)
        return Source(BUILT_IN, "MCP tools ask unless a policy.tools key says otherwise")
    if config.tools.get(tool) in ("allow", "ask", "deny"):
        return _tools_key(policy, tool)
    if tool == "run_command":
        return Source(BUILT_IN, "run_command is off unless policy.tools.run_command turns it on")
    if tool == "delete_file":
        return Source(BUILT_IN, "deletes ask unless policy.tools.delete_file says allow")
    return Source(
        CONFIG,
        "policy.confirm (reads run, changes ask under write-only)",
        f"confirm: {config.confirm}",
        ("policy", "confirm"),
    )


def unattended_source(unattended: Sequence[str], name: str) -> Source | None:
    """The policy.unattended item that lists `name` (an MCP tool by its listed name or a
    `*` pattern there, as `covered` judges it), or None."""
    entry = mcp_rule(unattended, name) if is_mcp_name(name) else name
    if entry is None or entry not in unattended:
        return None
    index = list(unattended).index(entry)
    return Source(CONFIG, "policy.unattended (what --yes approves)", entry, UNATTENDED, index)


UNATTENDED = ("policy", "unattended")


# -- the rules ------------------------------------------------------------------------------


def _first(found: Iterator[list[Source]]) -> list[Source]:
    return next((f for f in found if f), [])


def _blocked(policy: Policy, path: ResolvedPath) -> list[Source]:
    for form in path.forms:
        held = policy.blocked_dir(form)
        if held is None:
            continue
        for index, written in enumerate(policy.config.blocked_dirs):
            if not written.strip():
                continue
            spelled = [os.path.normpath(policy._absolute(written)), policy._real(written)]
            if Places(spelled).holding(form) is not None:
                what = "policy.blocked_dirs (never read, searched or written)"
                return [Source(CONFIG, what, written, ("policy", "blocked_dirs"), index)]
        what = "this agent's own state (audit log, backups, trash, sessions): always blocked"
        return [Source(BUILT_IN, what, held)]
    return []


def _secret(policy: Policy, path: ResolvedPath) -> list[Source]:
    homes = policy.classes.secrets.homes
    forms = (path.given, *path.forms)
    for source, glob, regex in _secret_entries(policy):
        if _matches(glob, regex, homes, forms):
            return [source]
    file = path.file
    secret = policy.secret_of(file.device, file.inode) if file and file.links > 1 else None
    if secret:
        named = _secret(policy, ResolvedPath(secret, secret, secret, secret))
        what = f"a hard link to {secret}, a secret (the same file under another name)"
        return [Source(FILE, what, secret), *named]
    return []


def _hard_link(path: ResolvedPath) -> list[Source]:
    if path.file is None or path.file.links < 2:
        return []
    what = f"the file has {path.file.links} names (hard links): its content is shared"
    return [Source(FILE, what, path.given)]


def _protected(policy: Policy, tool: str, path: ResolvedPath) -> list[Source]:
    """As Policy.protection sees `path` for a change by `tool`."""
    if tool not in WRITE_TOOLS or policy.protection(path, tool) is None:
        return []
    classes = policy.classes
    for form in path.forms:
        if classes.agent_config.match(form):
            return [_agent_place(policy, p) for p in classes.agent_paths if is_within(form, p)][:1]
    if tool in ("delete_file", "move_file"):
        held = [p for p in classes.agent_paths if is_within(p, path.entry)]
        if held:
            return [_agent_place(policy, held[0])]
    homes = classes.surfaces.homes
    forms = (path.given, *path.forms)
    if classes.surfaces.match(path.given) or any(classes.surfaces.match(f) for f in path.forms):
        for source, glob, regex in _surface_entries(policy):
            if _matches(glob, regex, homes, forms):
                return [source]
        return [Source(BUILT_IN, "the execution surfaces (cli/safety/sensitive.py)")]
    for form in path.forms:
        found = _dot_entry(policy, form)
        if found:
            return found
    return []


def _agent_place(policy: Policy, place: str) -> Source:
    if place in policy.config_files:
        return Source(FILE, "the config file in force (this agent's own policy)", place)
    return Source(BUILT_IN, "a place this agent loads its config from", place)


def _dot_entry(policy: Policy, form: str) -> list[Source]:
    home_entry = dot_entries.home_dot_entry(form, policy.classes.secrets.homes)
    if home_entry:
        return [
            Source(DOT_ENTRY, "a dot-entry of the home dir, which configures a program", home_entry)
        ]
    xdg = next((d for d in policy.xdg_homes if is_within(form, d)), None)
    if xdg:
        what = "an XDG base dir ($XDG_CONFIG_HOME…), which configures programs"
        return [Source(ENVIRONMENT, what, xdg)]
    root = policy.root_of(form)
    part = dot_entries.dot_component(form, root, policy.plain_dotfiles) if root else None
    if part is None or root is None:
        return []
    what = f"a dot-entry below the allowed dir {root} (policy.plain_dotfiles names plain data)"
    return [Source(DOT_ENTRY, what, part), _allowed_dir(policy, root)]


def _allowed_dirs(policy: Policy) -> Source:
    dirs = ", ".join(policy.allowed_dirs) or "none"
    what = "policy.allowed_dirs: the path is in none of them"
    return Source(ALLOWED_DIR, what, dirs, ("policy", "allowed_dirs"))


def _allowed_dir(policy: Policy, root: str) -> Source:
    for index, written in enumerate(policy.config.allowed_dirs):
        if written.strip() and policy._real(written) == root:
            return Source(
                ALLOWED_DIR, f"the allowed dir {written}", root, ("policy", "allowed_dirs"), index
            )
    return Source(ALLOWED_DIR, "an allowed dir", root, ("policy", "allowed_dirs"))


def _deny_patterns(policy: Policy, command: str) -> list[Source]:
    flat = " ".join(command.split())
    key = ("policy", "commands", "deny")
    what = "policy.commands.deny (a warning: only a person may say yes)"
    return [
        Source(CONFIG, what, pattern.pattern, key, index)
        for index, pattern in enumerate(policy.command_deny)
        if pattern.search(flat)
    ]


def _allow_prefixes(policy: Policy, command: str) -> list[Source]:
    allow = list(policy.config.commands.allow)
    key = ("policy", "commands", "allow")
    what = "policy.commands.allow (every part of the line starts with one)"
    return [
        Source(CONFIG, what, prefix, key, allow.index(prefix))
        for prefix in allowing_prefixes(command, allow)
    ]


def _tools_key(policy: Policy, key: str) -> Source:
    setting = policy.config.tools.get(key, "")
    return Source(CONFIG, f"policy.tools.{key}", f"{key}: {setting}", ("policy", "tools", key))


# -- the lists, entry by entry ------------------------------------------------------------------

Entry = tuple[Source, str, str]  # (where it is written, the glob or "", the regex or "")


def _secret_entries(policy: Policy) -> Iterator[Entry]:
    config = policy.config
    built_in = "the built-in secrets list (cli/safety/sensitive.py SECRETS)"
    listed = [(Source(BUILT_IN, built_in, g), g) for g in sensitive.SECRETS]
    listed += [
        (Source(CONFIG, "policy.secrets", g, ("policy", "secrets"), i), g)
        for i, g in enumerate(config.secrets)
    ]
    yield from _with_xdg(policy, listed)
    for index, regex in enumerate(config.sensitive_patterns):
        yield (
            Source(
                CONFIG, "policy.sensitive_patterns", regex, ("policy", "sensitive_patterns"), index
            ),
            "",
            regex,
        )


def _surface_entries(policy: Policy) -> Iterator[Entry]:
    config = policy.config
    built_in = "the built-in execution surfaces (cli/safety/sensitive.py EXECUTION_SURFACES)"
    listed = [(Source(BUILT_IN, built_in, g), g) for g in sensitive.EXECUTION_SURFACES]
    on_path = "a dir on $PATH: the programs there run by name"
    listed += [
        (Source(ENVIRONMENT, on_path, d), d) for d in path_classes.path_dirs(policy.path_var)
    ]
    own = "where this agent's own code is imported from"
    for d in policy.code_dirs:
        for spelled in dict.fromkeys((os.path.normpath(d), os.path.realpath(d))):
            listed.append((Source(BUILT_IN, own, spelled), spelled))
    listed += [
        (Source(CONFIG, "policy.execution_surfaces", g, ("policy", "execution_surfaces"), i), g)
        for i, g in enumerate(config.execution_surfaces)
    ]
    linked = "where a dot-entry of the home links to (a dotfiles repo)"
    listed += [(Source(DOT_ENTRY, linked, g), g) for g in policy.linked_dot_entries]
    yield from _with_xdg(policy, listed)
    for index, regex in enumerate(config.protected_patterns):
        key = ("policy", "protected_patterns")
        yield Source(CONFIG, "policy.protected_patterns", regex, key, index), "", regex


def _with_xdg(policy: Policy, listed: list[tuple[Source, str]]) -> Iterator[Entry]:
    """Each entry, then each as an XDG variable moves it (path_classes.xdg_entries)."""
    for source, glob in listed:
        yield source, glob, ""
    for source, glob in listed:
        for moved in path_classes.xdg_entries([glob], policy.xdg_env):
            yield replace(source, what=f"{source.what}, under an XDG base dir: {moved}"), moved, ""


def _matches(glob: str, regex: str, homes: tuple[str, ...], forms: Collection[str]) -> bool:
    one = _one_entry(glob, regex, homes)
    return any(one.match(form) for form in forms)


@functools.lru_cache(maxsize=4096)
def _one_entry(glob: str, regex: str, homes: tuple[str, ...]) -> path_classes.PathClass:
    """One entry as a class of its own: matched by the very code the whole list is."""
    return path_classes.PathClass(
        "entry", (glob,) if glob else (), (regex,) if regex else (), homes
    )
