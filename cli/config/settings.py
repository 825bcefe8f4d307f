"""The YAML config's schema and its places: the frozen dataclasses a config becomes, the names
the policy knows, where a config (and the state and data dirs) is found, and YAML read as a
config is read. `loading.py` checks that YAML against the dataclasses and builds them.

The dataclasses below are the schema: every key, its type and its default. `config.example.yaml`
documents each of them; a test checks that the two agree.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.errors import ConfigError

if TYPE_CHECKING:
    import yaml  # imported where a file is parsed: a run without a config file never pays it

APP_NAME = "metona-agent"

# The tools the policy knows, in the order the model sees them.
TOOL_NAMES = (
    "read_file",
    "edit_file",
    "write_file",
    "list_directory",
    "search_files",
    "create_directory",
    "move_file",
    "delete_file",
    "run_command",
    "git_status",
    "git_diff",
)
READ_TOOLS = frozenset({"read_file", "list_directory", "search_files", "git_status", "git_diff"})
WRITE_TOOLS = frozenset({"write_file", "edit_file", "create_directory", "move_file", "delete_file"})
SETTINGS = ("allow", "ask", "deny")
TOOL_MODES = ("auto", "native", "prompt")


def tool_mode_for(setting: str, native: bool, any_tools: bool) -> str:
    """native | prompt | off: how a model gets its tools under agent.tool_mode `setting`
    (`native`: the model reports tool support; `any_tools`: the policy enables some). Off
    when the policy enables none, or `setting` is native and the model has no support."""
    if not any_tools:
        return "off"
    if setting == "auto":
        return "native" if native else "prompt"
    if setting == "native" and not native:
        return "off"
    return setting


# The tools the model is offered: auto (the model's profile chooses, else full), full (all
# the policy enables), compact (read, list, search, write and edit, with short descriptions:
# cli/tools/compact.py).
TOOL_SETS = ("auto", "full", "compact")
# What helps a small model finish the work, each switchable (agent.aids, `agent eval --aids`):
# repair (unambiguous slips in a call are mended: cli/tools/repair.py), profiles (a model's
# tool mode, temperature, think and num_ctx floor from cli/config/profiles.py and `models:`),
# compact (the compact tool set where the profile chooses it), constrained (in prompt mode,
# the server holds the answer to a JSON schema of the offered calls, where it can:
# cli/loop/constrained.py), user_results (in prompt mode, tool results go as user messages:
# many templates of models without tool support drop the tool role's messages).
AID_NAMES = ("repair", "profiles", "compact", "constrained", "user_results")


def aids_of(value: bool | list[str]) -> frozenset[str]:
    """agent.aids as the set of aids in force: true (on) is all of them, false (off) none."""
    if isinstance(value, bool):
        return frozenset(AID_NAMES) if value else frozenset()
    return frozenset(value)


SANDBOX_MODES = ("auto", "bwrap", "landlock", "seatbelt", "off")
CONFIRM_MODES = ("all", "write-only", "none")
# `think` as Ollama takes it besides true/false (api.ThinkValue); gpt-oss takes only these.
THINK_LEVELS = ("low", "medium", "high", "max")
# The server's protocol: Ollama's own API, or an OpenAI-compatible one (cli/backends/).
API_KINDS = ("native", "openai")

# Secrets, execution surfaces and the agent's own config are one list each, in
# cli/safety/sensitive.py, read by the policy, the sandbox and the audit redactor alike; the YAML
# adds to them (policy.secrets, policy.execution_surfaces, and the regex forms below).

# The default command deny list, as case-insensitive regular expressions searched anywhere in
# the command. It catches the obvious spellings only: see docs/safety.md.
DEFAULT_COMMAND_DENY = (
    r"\brm\s+(-[a-z]*\s+)*-[a-z]*(r[a-z]*f|f[a-z]*r)[a-z]*\s+(/|/\*|~|\$HOME)(\s|$)",
    r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
    r"\bmkfs(\.\w+)?\b",
    r"\bdd\s+if=",
    r"\bwipefs\b",
    r"\bshred\b",
    r"\b(shutdown|reboot|poweroff|halt)\b",
    r"\b(useradd|usermod|userdel|passwd)\b",
    r"\bchmod\s+(-[a-z]+\s+)*0?777\b",
    r"\bchown\s+(-[a-z]+\s+)*root\b",
    r"\bcrontab\s+-e\b",
    r"\bsystemctl\s+(enable|disable)\b",
    r"\|\s*(sudo\s+)?(ba|z|da|k)?sh\b",
    r"/dev/(tcp|udp)/",
    r"\bbash\s+-i\s*>&",
    r"\beval\b",
    r"\bexec\s*>",
)


MCP_PREFIX = "mcp__"


def is_mcp_name(name: str) -> bool:
    """`mcp__git__status`, or a pattern such as `mcp__git__*`: a policy key for MCP tools."""
    return name.startswith(MCP_PREFIX) and len(name) > len(MCP_PREFIX)


def _setting(default: Any, **meta: Any) -> Any:
    """A dataclass field whose default may be mutable, with validation metadata."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class OllamaConfig:
    host: str = "http://localhost:11434"
    model: str = "qwen3:8b"
    think: bool | str = _setting(False, allow_bool=True, choices=THINK_LEVELS)
    timeout: float = _setting(300.0, minimum=1)
    keep_alive: str | int = _setting("5m", allow_int=True)
    # No num_ctx here: it is sized per request (cli/loop/sizing.py), and only a num_ctx the user
    # sets is a floor under that size.
    options: dict[str, Any] = _setting({"temperature": 0.7}, merge=True)
    max_num_ctx: int = _setting(32768, minimum=1024)
    # openai: `host` is an OpenAI-compatible base URL (LM Studio, llama-server, vLLM: …/v1).
    api: str = _setting("native", choices=API_KINDS)
    api_key_env: str = "OPENAI_API_KEY"  # with openai: the variable that holds the key
    stream: bool = True  # with openai: false asks every answer in one piece


@dataclass(frozen=True)
class AgentConfig:
    max_steps: int = _setting(10, minimum=1)
    system_prompt: str = ""
    max_answer_chars: int = _setting(200_000, minimum=1000)
    tool_mode: str = _setting("auto", choices=TOOL_MODES)
    project_instructions: bool = True
    instructions_max_bytes: int = _setting(8192, minimum=0)
    max_sessions: int = _setting(100, minimum=1)
    # When the next request would not fit the context, history is compacted once and deep,
    # to this share of what the messages may take (cli/loop/window.py): the server then evaluates
    # that much again, and the following steps append to it.
    compact_to: float = _setting(0.33, minimum=0.1, maximum=0.9)
    bell: bool = True  # ring the terminal bell when a confirmation waits for an answer
    # The aids for small models (AID_NAMES): on (YAML's `on` is true), off, or a list of them.
    aids: bool | list[str] = _setting(True, aid_names=AID_NAMES)
    tool_set: str = _setting("auto", choices=TOOL_SETS)
    # chat sends the prompt's fixed start to the server as it starts (Agent.start_prewarm);
    # `agent run` does only with --prewarm.
    prewarm: bool = True


@dataclass(frozen=True)
class CommandsConfig:
    deny: list[str] = _setting(list(DEFAULT_COMMAND_DENY), regex=True)
    allow: list[str] = _setting([])
    sandbox: str = _setting("auto", choices=SANDBOX_MODES)
    # More trees a sandboxed command may read (absolute or ~/), beside the built-in list of
    # what commands need from the home dir (cli/safety/sandbox/view.py HOME_READ_ONLY).
    read_only: list[str] = _setting([], absolute=True)


@dataclass(frozen=True)
class LimitsConfig:
    max_read_bytes: int = _setting(1024 * 1024, minimum=1)
    max_read_lines: int = _setting(500, minimum=1)
    max_write_bytes: int = _setting(5 * 1024 * 1024, minimum=1)
    max_list_entries: int = _setting(500, minimum=1)
    list_depth: int = _setting(3, minimum=1)
    search_results: int = _setting(50, minimum=1)
    max_search_results: int = _setting(500, minimum=1)
    max_search_files: int = _setting(10_000, minimum=1)
    max_search_file_bytes: int = _setting(500 * 1024, minimum=1)
    max_matches_per_file: int = _setting(10, minimum=1)
    command_timeout_ms: int = _setting(30_000, minimum=1)
    max_command_timeout_ms: int = _setting(120_000, minimum=1)
    max_command_output_bytes: int = _setting(100 * 1024, minimum=1)
    max_tool_calls_per_step: int = _setting(32, minimum=1)
    max_tool_result_chars: int = _setting(32_000, minimum=1000)
    # How long one tool call may work before it is stopped, cleanly (cli/fs/deadline.py's
    # Deadline says where it is checked, and which calls have their own timeouts instead).
    tool_seconds: int = _setting(60, minimum=1)
    max_backup_bytes: int = _setting(256 * 1024 * 1024, minimum=0)
    command_cpu_seconds: int = _setting(300, minimum=1)
    command_memory_mb: int = _setting(4096, minimum=16)
    command_processes: int = _setting(2048, minimum=8)
    sandbox_scan_entries: int = _setting(200_000, minimum=1)


@dataclass(frozen=True)
class PolicyConfig:
    allowed_dirs: list[str] = _setting(["."])
    blocked_dirs: list[str] = _setting(
        ["/etc", "/sys", "/proc", "/dev", "/boot", "/root", "~/.ssh", "~/.gnupg", "~/.aws"]
    )
    secrets: list[str] = _setting([], glob=True)
    execution_surfaces: list[str] = _setting([], glob=True)
    sensitive_patterns: list[str] = _setting([], regex=True)
    confirm: str = _setting("write-only", choices=CONFIRM_MODES)
    tools: dict[str, str] = _setting({}, keys=TOOL_NAMES, choices=SETTINGS, mcp_names=True)
    unattended: list[str] = _setting(
        ["write_file", "edit_file", "create_directory"], choices=TOOL_NAMES, mcp_names=True
    )
    protected_patterns: list[str] = _setting([], regex=True)
    # Dotfile names (globs of one component) that are plain data, added to the built-in
    # list in cli/safety/sensitive.py: writing them inside an allowed dir needs no person.
    plain_dotfiles: list[str] = _setting([], name_glob=True)
    trash: bool = True
    commands: CommandsConfig = field(default_factory=CommandsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)


@dataclass(frozen=True)
class McpToolsConfig:
    include: list[str] = _setting([])  # fnmatch patterns of the server's tool names
    exclude: list[str] = _setting([])


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server: `command` (and `args`, `env`, `cwd`) for stdio, or `url` (and
    `headers`) for streamable HTTP. `${VAR}` in the command, args, env and header values
    and the URL is read from our environment."""

    command: str = ""
    args: list[str] = _setting([])
    env: dict[str, str] = _setting({}, strings=True)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = _setting({}, strings=True)
    enabled: bool = True
    timeout: float = _setting(60.0, minimum=1)
    startup_timeout: float = _setting(20.0, minimum=1)
    tools: McpToolsConfig = field(default_factory=McpToolsConfig)
    sandbox: str = _setting("off", choices=("bwrap", "landlock", "seatbelt", "off"))
    network: bool = False
    # Its tools change nothing: plan mode (`--plan`, /plan) offers them too.
    read_only: bool = False


@dataclass(frozen=True)
class McpConfig:
    servers: dict[str, McpServerConfig] = _setting({}, of=McpServerConfig)


@dataclass(frozen=True)
class HookConfig:
    """One hook (cli/loop/hooks.py): the user's own program, run outside the sandbox with
    the call (or its result, or the turn's end) as JSON on stdin."""

    match: str = "*"  # a glob of tool names (mcp__git__* too); the stop hook ignores it
    command: list[str] = _setting([])  # its argv, run as is (no shell); a string is split
    timeout_seconds: float = _setting(0.0, minimum=0)  # 0: hooks.timeout_seconds


@dataclass(frozen=True)
class HooksConfig:
    """hooks.pre_tool, hooks.post_tool, hooks.stop: read from the user's config only (the
    file found in the config dir, or -c), never from a project's files."""

    pre_tool: list[HookConfig] = _setting([], hooks=True)
    post_tool: list[HookConfig] = _setting([], hooks=True)
    stop: list[HookConfig] = _setting([], hooks=True)
    timeout_seconds: float = _setting(10.0, minimum=0.1)


@dataclass(frozen=True)
class ModelProfileConfig:
    """One entry of `models:`: what a model whose name matches `match` (and whose size fits
    `size`) gets; a key left out is the built-in profile's (cli/config/profiles.py)."""

    match: str = ""  # a glob of the model's name, case ignored: "qwen3:*", "*coder*"
    size: str = ""  # its parameters: "<4B", "<=1.7B", ">=7B", ">100M"; "" any size
    tool_mode: str = ""  # auto | native | prompt
    temperature: float | None = None
    think: bool | str | None = None  # true, false or a level
    tool_set: str = ""  # full | compact
    num_ctx: int | None = None  # the least num_ctx asked for


@dataclass(frozen=True)
class Config:
    ollama: OllamaConfig = field(default_factory=OllamaConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    hooks: HooksConfig = field(default_factory=HooksConfig)
    # Model profiles of the user's own, checked before the built-in ones (first match wins).
    models: list[ModelProfileConfig] = _setting([], profiles=True)
    source: str | None = field(default=None, compare=False)  # the file it came from
    # The line of every key the file set (dotted path as a tuple), for `agent config`.
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict, compare=False)


# -- where things live -----------------------------------------------------------------------


def _xdg_dir(env: Mapping[str, str], var: str, fallback: str) -> Path:
    value = env.get(var, "")
    # The XDG spec says relative values are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value) / APP_NAME
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / fallback / APP_NAME


def config_dir(env: Mapping[str, str]) -> Path:
    return _xdg_dir(env, "XDG_CONFIG_HOME", ".config")


def state_dir(env: Mapping[str, str]) -> Path:
    return _xdg_dir(env, "XDG_STATE_HOME", ".local/state")


def data_dir(env: Mapping[str, str]) -> Path:
    return _xdg_dir(env, "XDG_DATA_HOME", ".local/share")


def config_locations(env: Mapping[str, str]) -> list[str]:
    """Every dir a config would be loaded from, whether or not it exists yet:
    $XDG_CONFIG_HOME/metona-agent and ~/.config/metona-agent (the one used when
    XDG_CONFIG_HOME is unset, relative, or changes between runs). A config the model
    creates would be obeyed by the next run, so the policy protects all of them."""
    home = env.get("HOME") or os.path.expanduser("~")
    dirs = [str(config_dir(env)), str(Path(home) / ".config" / APP_NAME)]
    return list(dict.fromkeys(os.path.normpath(d) for d in dirs))


def find_config(explicit: str | None, env: Mapping[str, str]) -> Path | None:
    """`-c PATH` if given (it must exist), else the XDG config file if it exists, else None."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {explicit} does not exist: check the -c/--config path")
        return path
    default = config_dir(env) / "config.yaml"
    return default if default.is_file() else None


def resolve_host(
    flag: str | None, env: Mapping[str, str], config: Config, api: str | None = None
) -> str:
    """The one lookup order for the server: --host > OLLAMA_HOST > ollama.host > default.
    With `api` openai (default: ollama.api) the URL is the server's base URL and OLLAMA_HOST,
    which names an Ollama server, is not read; with native, a URL ending in /v1 is refused:
    it is an OpenAI-compatible base URL, and /api/chat is not under it."""
    from cli.backends.ollama import (
        normalize_host,  # here, not at the top: config stays importable alone
    )

    api = api or config.ollama.api
    sources = [
        ("--host", flag),
        ("OLLAMA_HOST", env.get("OLLAMA_HOST") if api == "native" else None),
        ("ollama.host", config.ollama.host),
    ]
    for source, value in sources:
        if value and value.strip():
            try:
                url = normalize_host(value)
            except ValueError as exc:
                raise ConfigError(f"{source}: {exc}") from None
            if api == "native" and url.endswith("/v1"):
                raise ConfigError(
                    f"{source}: {url} is an OpenAI-compatible URL (it ends in /v1) and "
                    "ollama.api is native: add --api openai (or set ollama.api: openai)"
                )
            return url
    return normalize_host("http://localhost:11434")


# -- reading YAML ----------------------------------------------------------------------------


def read_yaml(
    text: str, source: str, what: str = "config", *, items: bool = False
) -> tuple[Any, dict[tuple[str, ...], int]]:
    """YAML text as plain data, read as a config is (no aliases, no deep nesting, no key twice
    in a mapping: ConfigError naming `what`, the file and the line), and the line of every
    key by its path; with `items`, of every list item too, its index as a path component."""
    import yaml

    try:
        loader = _loader_class()(text, source)  # the reader refuses some characters at once
        loader.what = what
        try:
            node = loader.get_single_node()
            lines: dict[tuple[str, ...], int] = {}
            if node is not None:
                _index_lines(node, (), lines, f"{what} {source}", items)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{what} {source}{where}: invalid YAML: {problem}") from None
    return data, lines


@functools.cache
def _loader_class() -> type[Any]:
    """PyYAML's safe loader, refusing while it composes what no config of ours needs and what
    would make the walk over the result blow up or never end:

    - an alias (`*name`): a "billion laughs" is a few lines of aliases of aliases; composed,
      it is a few nodes shared many times over, and whatever walks the result (our line
      index, the checks, `agent config`) walks billions; a self-referencing one never ends.
      Aliases are refused, not counted: no key of ours needs one, so there is no limit for a
      smaller bomb to stay under, and the refusal names the line of the first.
    - nesting deeper than MAX_JSON_DEPTH (the same guard as server JSON): PyYAML composes
      recursively, so 100,000 `[` would end in a RecursionError; a config is a few levels
      deep."""
    import yaml

    from cli.backends.messages import MAX_JSON_DEPTH

    class Loader(yaml.SafeLoader):
        def __init__(self, text: str, source: str) -> None:
            super().__init__(text)
            self.source = source
            self.what = "config"
            self.depth = 0

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                raise self.refused(
                    "YAML aliases (*name) are not supported here; write the value out"
                )
            if self.depth >= MAX_JSON_DEPTH:
                raise self.refused(
                    f"nested deeper than {MAX_JSON_DEPTH} levels; a config is a few levels "
                    "deep (see config.example.yaml)"
                )
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def refused(self, why: str) -> ConfigError:
            event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
            where = f", line {event.start_mark.line + 1}" if event.start_mark else ""
            return ConfigError(f"{self.what} {self.source}{where}: {why}")

    return Loader


def _index_lines(
    node: yaml.Node,
    path: tuple[str, ...],
    lines: dict[tuple[str, ...], int],
    source: str,
    items: bool = False,
) -> None:
    """Record the line of every key. Refuse duplicate keys (PyYAML keeps the last one
    silently, which hides a typo'd second `policy:` block). No node is met twice: the loader
    refused aliases, and nesting past MAX_JSON_DEPTH, while composing."""
    import yaml

    lines.setdefault(path, node.start_mark.line + 1)
    children: list[tuple[str | None, yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in keys:
                dotted = ".".join((*path, key))
                raise ConfigError(
                    f"{source}, line {key_node.start_mark.line + 1}: "
                    f"key '{dotted}' appears twice; keep one"
                )
            keys.add(key)
            key_path = (*path, key)
            lines[key_path] = key_node.start_mark.line + 1
            children.append((key, value_node))
    elif isinstance(node, yaml.SequenceNode):
        numbered = enumerate(node.value)
        children = [(str(i) if items else None, item) for i, item in numbered]
    for child_key, child in children:
        child_path = path if child_key is None else (*path, child_key)
        _index_lines(child, child_path, lines, source, items)


def kind_of(value: Any) -> str:
    """A value from a YAML file in words, for an error line: "a list", "a string ('x')"."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):  # shortened: a whole file read as one string is no message
        return f"a string ({shortened(value)!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def shortened(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "READ_TOOLS",
    "TOOL_NAMES",
    "WRITE_TOOLS",
    "Config",
    "find_config",
    "resolve_host",
]
