"""Building the core objects from flags, environment and config: shared by `run` and `chat`."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from cli.backends.messages import ChatBackend
from cli.backends.ollama import OllamaClient
from cli.config.loading import load_config
from cli.config.settings import (
    API_KINDS,
    Config,
    aids_of,
    config_dir,
    config_locations,
    data_dir,
    find_config,
    resolve_host,
    state_dir,
)
from cli.errors import UsageError
from cli.journal.changes import ChangeStore
from cli.loop.agent import Agent
from cli.loop.agent_base import AgentSettings
from cli.loop.approval import Approver
from cli.loop.hooks import Hooks
from cli.loop.instructions import Instructions, load_instructions
from cli.loop.prompt import Surroundings
from cli.safety.policy import Policy
from cli.safety.sandbox.spec import SandboxSpec
from cli.tools import ToolContext

if TYPE_CHECKING:
    from cli.mcp.servers import McpServers


@dataclass(frozen=True)
class Choices:
    """What the command line said; None means "use the config"."""

    model: str | None = None
    host: str | None = None
    config_path: str | None = None
    think: bool | str | None = None  # a str is a level: low | medium | high | max
    max_steps: int | None = None
    api: str | None = None  # native | openai
    instructions: bool | None = None  # False: --no-instructions
    mcp_config: str | None = None  # --mcp-config: a {"mcpServers": …} JSON file for this session
    # -v: where the MCP servers' stderr goes too (server, bytes); otherwise only to their logs
    mcp_stderr: Callable[[str, bytes], None] | None = None
    plan: bool = False  # --plan: only the tools that change nothing (Agent.plan_mode)


def load(choices: Choices, environ: Mapping[str, str]) -> Config:
    return load_config(find_config(choices.config_path, environ))


def build_agent(
    choices: Choices,
    config: Config,
    *,
    environ: Mapping[str, str],
    cwd: str,
    home: str,
    approver: Callable[[Policy], Approver],
) -> Agent:
    """The agent for these choices. `approver` gets the policy, since some approvers (the
    REPL's) show what it decided."""
    client = build_backend(choices, config, environ)
    policy = build_policy(config, environ, cwd, home)
    instructions = _instructions(choices, config, environ, policy, home)
    settings = AgentSettings(
        model=choices.model or config.ollama.model,
        think=config.ollama.think if choices.think is None else choices.think,
        max_steps=choices.max_steps or config.agent.max_steps,
        options=config.ollama.options,
        keep_alive=config.ollama.keep_alive,
        system_prompt=config.agent.system_prompt,
        max_answer_chars=config.agent.max_answer_chars,
        max_num_ctx=config.ollama.max_num_ctx,
        tool_mode=config.agent.tool_mode,
        instructions=instructions.text,
        compact_to=config.agent.compact_to,
        model_chosen=model_chosen(choices, config),
        aids=aids_of(config.agent.aids),
        tool_set=config.agent.tool_set,
        profiles=tuple(config.models),
        chosen=chosen_settings(choices, config),
    )
    context = ToolContext(
        cwd=policy.cwd,
        limits=config.policy.limits,
        hides=policy.hides,
        hides_entry=policy.hides_entry,
        secret_of=policy.secret_of,
        environ=dict(environ),
        roots=policy.allowed_dirs,
        sandbox=sandbox_spec(config, policy, home),
        changes=change_store(config, environ),
        trash=config.policy.trash,
    )
    surroundings = Surroundings(
        policy.cwd,
        policy.allowed_dirs,
        f"{platform.system()} {platform.release()}",
        date.today(),
    )
    agent = Agent(client, policy, approver(policy), context, settings, surroundings)
    agent.instructions = instructions
    agent.plan_mode = choices.plan
    if config.hooks.pre_tool or config.hooks.post_tool or config.hooks.stop:
        agent.hooks = Hooks(config.hooks, policy.cwd, environ)
    agent.mcp = start_mcp(choices, config, environ, policy, sandbox_spec(config, policy, home))
    return agent


def model_chosen(choices: Choices, config: Config) -> bool:
    """Whether the user named the model: -m, or an ollama.model in the config file other
    than the default (`agent init` writes the default). A model nobody chose gives way to
    a server's only one (Agent.model_info)."""
    if choices.model is not None:
        return True
    return ("ollama", "model") in config.lines and config.ollama.model != Config().ollama.model


def chosen_settings(choices: Choices, config: Config) -> frozenset[str]:
    """What the user set themselves, which a model's profile leaves as it is: the tool mode,
    the temperature and thinking, each by a flag or a key of the config file."""
    chosen = set()
    if ("agent", "tool_mode") in config.lines:
        chosen.add("tool_mode")
    if ("ollama", "options", "temperature") in config.lines:
        chosen.add("temperature")
    if choices.think is not None or ("ollama", "think") in config.lines:
        chosen.add("think")
    return frozenset(chosen)


def build_policy(config: Config, environ: Mapping[str, str], cwd: str, home: str) -> Policy:
    private = [str(state_dir(environ)), str(data_dir(environ))]
    return Policy(
        config.policy,
        cwd,
        home,
        config_path=config.source,
        private_dirs=private,
        config_dirs=config_locations(environ),
        path_var=environ.get("PATH", ""),
        xdg=environ,
        code_dirs=own_code_dirs(),
    )


def own_code_dirs() -> list[str]:
    """Where this process imports its Python code from: its environment (a venv the project
    holds under any name: env/, .direnv/…), every directory on sys.path, and the package's
    own source (an editable install's checkout). A file the model wrote there would be run
    by this agent, some of it in this very run (imports wait until they are needed)."""
    import cli

    places = [sys.prefix, sys.exec_prefix, os.path.dirname(os.path.abspath(cli.__file__))]
    places += [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
    return list(dict.fromkeys(places))


def sandbox_spec(config: Config, policy: Policy, home: str) -> SandboxSpec:
    """run_command's sandbox, which an MCP server with `sandbox:` gets too."""
    return SandboxSpec(
        config.policy.commands.sandbox,
        policy.allowed_dirs,
        policy.blocked_dirs,
        home,
        policy.classes,
        config.policy.limits.sandbox_scan_entries,
        tuple(config.policy.commands.read_only),
    )


def start_mcp(
    choices: Choices,
    config: Config,
    environ: Mapping[str, str],
    policy: Policy,
    spec: SandboxSpec,
) -> McpServers | None:
    """The configured MCP servers (and --mcp-config's), started now, in parallel: by the
    first model request, which waits for them, most are up."""
    servers = dict(config.mcp.servers)
    if choices.mcp_config:
        from cli.mcp.importing import load_json_servers

        servers.update(load_json_servers(choices.mcp_config))
    if not servers:
        return None
    from cli.mcp.servers import McpServers

    mcp = McpServers(
        servers,
        environ=environ,
        cwd=policy.cwd,
        log_dir=state_dir(environ) / "mcp",
        sandbox=spec,
        echo=choices.mcp_stderr,
    )
    mcp.start()
    return mcp


def _instructions(
    choices: Choices, config: Config, environ: Mapping[str, str], policy: Policy, home: str
) -> Instructions:
    """The project's instruction files, unless the config or --no-instructions says not."""
    if choices.instructions is False or not config.agent.project_instructions:
        return Instructions()
    return load_instructions(
        policy.cwd,
        home,
        config_dir=str(config_dir(environ)),
        max_bytes=config.agent.instructions_max_bytes,
        hides=policy.hides,
    )


def build_backend(choices: Choices, config: Config, environ: Mapping[str, str]) -> ChatBackend:
    """The client for the model server these choices name (`agent models` uses it alone):
    Ollama's native API, or an OpenAI-compatible one (--api / ollama.api)."""
    api = choices.api or config.ollama.api
    if api not in API_KINDS:
        raise UsageError(f"--api: expected one of {', '.join(API_KINDS)}; got {api!r}")
    host = resolve_host(choices.host, environ, config, api)
    if api == "openai":
        from cli.backends.openai import OpenAIClient  # here: a native run never loads it

        # The key only ever comes from the environment, never from the YAML.
        key_env = config.ollama.api_key_env
        return OpenAIClient(
            host,
            timeout=config.ollama.timeout,
            api_key=(environ.get(key_env) or None) if key_env else None,
            api_key_env=key_env,
            stream=config.ollama.stream,
            max_answer_chars=config.agent.max_answer_chars,
        )
    return OllamaClient(
        host, timeout=config.ollama.timeout, api_key=environ.get("OLLAMA_API_KEY") or None
    )


def change_store(config: Config, environ: Mapping[str, str], session: str = "") -> ChangeStore:
    """The journal of changes, backups and trash; temp files of writes that died with their
    process (kill -9, power loss) are cleaned up here, at start."""
    store = ChangeStore(
        state_dir(environ) / "changes",
        max_bytes=config.policy.limits.max_backup_bytes,
        session=session,
    )
    with contextlib.suppress(OSError):
        store.clean_stale()
    return store


def home_of(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or os.path.expanduser("~")
