"""What every part of the agent shares (cli/loop/agent.py's Agent is built on it): its
settings, the model's capabilities and profile, the tools offered (plan mode's too), the
system prompt and the context block that leads the first user message, the notices said
once. Never prints."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cli import tools
from cli.backends.messages import (
    ChatBackend,
    ChatRequest,
    ConstrainsReplies,
    Message,
    ModelInfo,
    ServesOneModel,
)
from cli.config.profiles import Profile, profile_for, tool_mode_setting
from cli.config.settings import READ_TOOLS, ModelProfileConfig, tool_mode_for
from cli.errors import AgentError
from cli.loop.approval import Approver
from cli.loop.constrained import reply_schema
from cli.loop.events import (
    Event,
    Notice,
)
from cli.loop.guards import (
    StepLimitAnswer,
    wrap_up_always,
)
from cli.loop.hooks import Hooks
from cli.loop.instructions import Instructions
from cli.loop.prompt import Surroundings, build_system_prompt, context_block, with_context
from cli.loop.sizing import (
    Calibration,
)
from cli.loop.tokens import message_tokens
from cli.loop.window import Window
from cli.safety.policy import Policy
from cli.tools import Tool, ToolContext

if TYPE_CHECKING:
    from cli.mcp.servers import McpServers

# What plan mode offers of our tools: those that change nothing.
PLAN_TOOLS = READ_TOOLS


@dataclass(frozen=True)
class AgentSettings:
    model: str
    think: bool | str = False  # a str is a level: low | medium | high | max
    max_steps: int = 10
    options: Mapping[str, Any] = field(default_factory=dict)
    keep_alive: str | int | None = None
    system_prompt: str = ""  # the user's addition, appended to ours
    max_answer_chars: int = 200_000  # one model call streaming more is stopped: a loop
    max_num_ctx: int = 32768  # the most num_ctx asked for unless options.num_ctx is more
    # How tools reach the model: native (the `tools` field), prompt (described in the system
    # prompt, calls read back from text), auto (native when the model reports tool support).
    tool_mode: str = "auto"
    instructions: str = ""  # the project's instructions section (cli/loop/instructions.py)
    # A compaction leaves this share of the history's room (cli/loop/window.py, Agent._share).
    compact_to: float = 0.33
    # False: the model is the default (no -m, no ollama.model in the config file); a server
    # that serves one model then gets that one (Agent.model_info).
    model_chosen: bool = True
    # The aids for small models in force (cli/config/settings.py AID_NAMES); none by default
    # here, as the wiring passes agent.aids.
    aids: frozenset[str] = frozenset()
    tool_set: str = "auto"  # auto (the profile's, else full) | full | compact
    profiles: tuple[ModelProfileConfig, ...] = ()  # the user's `models:` entries
    # What the user set themselves, which no profile changes: any of tool_mode,
    # temperature, think (a flag, a config key, /think).
    chosen: frozenset[str] = frozenset()


class AgentBase:
    """An agent's state and what it knows of the model and its tools: runs turns against one
    backend under one policy. Model capabilities are looked up once per model and cached."""

    def __init__(
        self,
        backend: ChatBackend,
        policy: Policy,
        approver: Approver,
        context: ToolContext,
        settings: AgentSettings,
        surroundings: Surroundings,
        clock: Callable[[], float] = time.monotonic,
        toolbox: Mapping[str, Tool] = tools.ALL_TOOLS,
    ) -> None:
        self.backend = backend
        self.policy = policy
        self.approver = approver
        self.context = context
        self.settings = settings
        self.surroundings = surroundings
        self.clock = clock
        self.toolbox = toolbox
        self.calibration = Calibration()  # per model: our token estimate against the server's
        # Per model, this session: the num_ctx last asked for (it never shrinks: any other
        # size is a reload), and the context a server's refusal said it runs the model with.
        self._held: dict[str, int] = {}
        self._stated: dict[str, int] = {}
        self._models: dict[str, ModelInfo] = {}
        self._profiles: dict[object, Profile | None] = {}
        self._told: set[str] = set()  # notices already given this session
        # What the server is sent of the conversation (cli/loop/window.py): append-only between
        # compactions. One per conversation list; /clear and --resume start a new one.
        self._window = Window()
        self._window_of: list[Message] | None = None
        # The last request (model, tools, messages as sent): a request that does not start
        # with all of it costs the server a new evaluation, which -v says.
        self._sent: tuple[str, object, list[dict[str, Any]], list[Message]] | None = None
        self._compacting = False  # the next request's prefix change is a compaction's
        # The last request shared a prefix (beyond nothing) with the one before it: what the
        # server counts for it may be only what followed that prefix.
        self._shared = False
        self._context_text, self._context_tokens = "", 0  # the context block, and its cost
        self._last_request: ChatRequest | None = None  # this turn's last request sent
        # agent.prewarm: the stable prefix sent while the user types (start_prewarm); the
        # first request waits for it, and what went wrong is said under -v.
        self._prewarming: threading.Thread | None = None
        self._prewarm_failed = ""
        self._warmed = False  # a prewarm reached the server: the first request shares it
        # The project's instruction files, for the context block (the wiring loads them).
        self.instructions = Instructions()
        # What to do when the model is still calling tools at the step limit: `agent run`
        # wraps up; chat asks the user (continue, wrap up, stop).
        self.at_step_limit: Callable[[int], StepLimitAnswer] = wrap_up_always
        # Servers (per model) that refused `role: tool` messages without tools: results go
        # to them as labelled user messages.
        self._no_tool_role: set[str] = set()
        # MCP servers (cli/mcp/servers.py), started by the wiring; their tools join ours
        # before the first model request, which waits for them (each at most its
        # startup_timeout).
        self.mcp: McpServers | None = None
        self._mcp_waited = False
        # Plan mode (`--plan`, chat's /plan and /go): only the tools that change nothing are
        # offered (PLAN_TOOLS, and an MCP server's where its config says read_only), and the
        # context block asks for a plan.
        self.plan_mode = False
        # hooks.pre_tool / post_tool / stop from the user's config (cli/loop/hooks.py); what
        # they did since the last look, for the loop to yield (and the audit log to keep).
        self.hooks: Hooks | None = None
        self._hook_events: list[Event] = []

    def close(self) -> None:
        """The session is over: MCP servers are stopped."""
        if self.mcp is not None:
            self.mcp.close()

    def mcp_tools(self) -> list[str]:
        """The MCP servers' tools as they are now (listed again where a server said they
        changed); the lines to tell the user: the first time, after waiting for the servers
        to start, which could not be used; each time, what is new about their tools (a name
        listed twice)."""
        if self.mcp is None:
            return []
        said: list[str] = []
        if not self._mcp_waited:
            said, self._mcp_waited = self.mcp.wait(), True
        else:
            self.mcp.refresh()
        offered = self.mcp.tools
        self.toolbox = {**tools.ALL_TOOLS, **{name: t.offered for name, t in offered.items()}}
        # The policy judges each by the name its server listed it by, not by ours.
        self.policy.mcp_tools = {name: tool.listed for name, tool in offered.items()}
        return said + self.mcp.notices()

    def model_info(self) -> ModelInfo:
        """/api/show for the current model, once (raises ModelNotFound for unknown models).
        A model nobody chose (the default) is, on a server that serves one, that one."""
        if not self.settings.model_chosen:
            only = self.backend.only_model() if isinstance(self.backend, ServesOneModel) else None
            model = only or self.settings.model
            self.settings = dataclasses.replace(self.settings, model=model, model_chosen=True)
        name = self.settings.model
        if name not in self._models:
            self._models[name] = self.backend.model_info(name)
        return self._models[name]

    def tool_mode(self, info: ModelInfo | None = None) -> str:
        """native | prompt | off: how this model gets its tools (off: the policy enables
        none, or agent.tool_mode is native and the model has no tool support)."""
        info = info or self.model_info()
        enabled = bool(self.policy.enabled_tools())
        profile = self._profiled("tool_mode")
        setting = tool_mode_setting(self.settings.tool_mode, profile, info.supports_tools)
        return tool_mode_for(setting, info.supports_tools, enabled)

    def tools_on(self) -> bool:
        return self.tool_mode() != "off"

    def thinking_on(self) -> bool:
        return bool(self.think) and self.model_info().supports_thinking

    def profile(self, info: ModelInfo | None = None) -> Profile | None:
        """The current model's profile (cli/config/profiles.py), when the aids use one."""
        if not {"profiles", "compact"} & self.settings.aids:
            return None
        info = info or self.model_info()
        key = (info.name, info.parameter_size, self.settings.profiles)
        if key not in self._profiles:
            found = profile_for(info.name, info.parameter_size, self.settings.profiles)
            self._profiles[key] = found
        return self._profiles[key]

    def _profiled(self, what: str) -> Profile | None:
        """The profile, where it may say `what` (the user did not set it themselves)."""
        if "profiles" not in self.settings.aids or what in self.settings.chosen:
            return None
        return self.profile()

    @property
    def think(self) -> bool | str:
        """Thinking as asked for: the user's setting, else the model's profile's (the
        setting when the model cannot be looked up: its error comes where it is needed)."""
        try:
            profile = self._profiled("think")
        except AgentError:
            return self.settings.think
        if profile is not None and profile.think is not None:
            return profile.think
        return self.settings.think

    def tool_set(self) -> str:
        """full | compact: agent.tool_set, else (auto) the profile's, else full."""
        if self.settings.tool_set != "auto":
            return self.settings.tool_set
        profile = self.profile() if "compact" in self.settings.aids else None
        return profile.tool_set if profile is not None and profile.tool_set else "full"

    def offered_tools(self, tool_set: str | None = None) -> list[str]:
        """The tools offered to the model: those the policy enables, of the compact set only
        when that is in force (MCP tools either way), in plan mode only those that change
        nothing. `tool_set`: the set in force where it is known without asking the server."""
        names = self.policy.enabled_tools()
        if (tool_set or self.tool_set()) == "compact":
            names = [n for n in names if n in tools.COMPACT_TOOLS or n not in tools.ALL_TOOLS]
        if self.plan_mode:
            names = [n for n in names if n in PLAN_TOOLS or self._read_only_mcp(n)]
        return names

    def _read_only_mcp(self, name: str) -> bool:
        """An MCP tool whose server's config says `read_only: true` (offered in plan mode)."""
        if self.mcp is None or name in tools.ALL_TOOLS:
            return False
        offered = self.mcp.tools.get(name)
        server = self.mcp.servers.get(offered.server) if offered is not None else None
        return server is not None and server.config.read_only

    def box(self) -> Mapping[str, Tool]:
        """Every tool by name, the compact definitions in place of the full ones when the
        compact set is in force (the same code runs them)."""
        if self.tool_set() != "compact":
            return self.toolbox
        return {**self.toolbox, **tools.COMPACT_TOOLS}

    def _constrains(self, mode: str) -> bool:
        """Prompt mode's replies are held to a JSON schema (agent.aids: constrained): where the
        server can, and not while the model thinks (its thinking is free text)."""
        if mode != "prompt" or "constrained" not in self.settings.aids or self.thinking_on():
            return False
        return isinstance(self.backend, ConstrainsReplies) and self.backend.constrains_replies()

    def _reply_format(self, mode: str, definitions: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The JSON schema of this request's reply (cli/loop/constrained.py), or None."""
        return reply_schema(definitions) if definitions and self._constrains(mode) else None

    def _user_results(self, info: ModelInfo) -> bool:
        """Tool results go as labelled user messages: in prompt mode under agent.aids
        user_results (many templates of models without tool support drop the tool role's
        messages: Ollama's gemma3 and mistral ones, llama-cpp-python's chatml-function-calling),
        and to a server that refused the tool role."""
        if self.settings.model in self._no_tool_role:
            return True
        return "user_results" in self.settings.aids and self.tool_mode(info) == "prompt"

    def system_prompt(self, mode: str | None = None) -> str:
        mode = mode or self.tool_mode()
        described = ""
        if mode == "prompt":
            from cli.loop.toolprompt import describe_tools

            box = self.box()
            definitions = [box[n].definition() for n in self.offered_tools()]
            described = describe_tools(definitions, constrained=self._constrains(mode))
        return build_system_prompt(mode != "off", self.settings.system_prompt, tools_text=described)

    def context_text(self) -> str:
        """The context block (cli/loop/prompt.py): where the agent stands and the project's
        instructions, the same for every request of this agent. It leads the first user
        message each request holds, never the system prompt, whose bytes stay those of every
        other run with this config and model."""
        block = context_block(self.surroundings, self.settings.instructions, plan=self.plan_mode)
        if self._context_text != block:
            self._context_text = block
            self._context_tokens = message_tokens({"role": "user", "content": block + "\n\n"})
        return block

    def _context_cost(self) -> int:
        self.context_text()
        return self._context_tokens

    def _placed(self, messages: list[Message]) -> list[Message]:
        """`messages` as sent: the first user message led by the context block (a copy: the
        conversation keeps the user's words as they were typed)."""
        block = self.context_text()
        for index, message in enumerate(messages):
            if message.get("role") == "user":
                content = message.get("content")
                text = content if isinstance(content, str) else ""
                placed = {**message, "content": with_context(block, text)}
                return [*messages[:index], placed, *messages[index + 1 :]]
        return messages

    def _set_system_prompt(self, conversation: list[Message], mode: str | None = None) -> None:
        system = {"role": "system", "content": self.system_prompt(mode)}
        if conversation and conversation[0].get("role") == "system":
            conversation[0] = system
        else:
            conversation.insert(0, system)

    def _capability_notices(self, info: ModelInfo, mode: str) -> Iterator[Event]:
        """What the model cannot do, said once per session (not on every turn)."""
        notices = []
        if not info.supports_tools and self.policy.enabled_tools():
            if mode == "prompt":
                notices.append(
                    f"model '{info.name}' has no native tool support: its tools are described "
                    "in the prompt instead (agent.tool_mode)"
                )
            else:
                notices.append(
                    f"model '{info.name}' does not support tools: it answers without them"
                )
        # Assumed capabilities come with the backend's own note, which says this already.
        if self.think and not info.supports_thinking and not info.capabilities_assumed:
            notices.append(f"model '{info.name}' cannot think: thinking stays off")
        for text in notices:
            yield from self._once(text)

    def _once(self, text: str) -> Iterator[Event]:
        """A notice said once per session."""
        if text not in self._told:
            self._told.add(text)
            yield Notice(text)

    def _options(self) -> Mapping[str, Any]:
        """ollama.options, with the profile's temperature where the user set none."""
        profile = self._profiled("temperature")
        if profile is None or profile.temperature is None:
            return self.settings.options
        return {**self.settings.options, "temperature": profile.temperature}

    def _think_field(self, info: ModelInfo) -> bool | str | None:
        """`think` only when asked for and possible: a level as it is, true or false as a
        boolean. A thinking model that was not asked gets `think: false`, since Ollama turns
        thinking on when the field is absent; any other model gets no field (true would be a
        400). gpt-oss ignores booleans: true is sent as its default level, "medium"."""
        if not info.supports_thinking:
            return None
        think = self.think
        if think is True and info.thinks_in_levels:
            return "medium"
        return think

    def _why_none_offered(self) -> str:
        if not self.model_info().supports_tools:
            return f"model '{self.settings.model}' does not support tools"
        return "the policy enables none"
