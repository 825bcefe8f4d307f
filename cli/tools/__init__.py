"""The tool registry: every tool the agent can offer, by name, in the order the model sees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cli.config.settings import TOOL_NAMES
from cli.errors import ToolError
from cli.fs.paths import ResolvedPath
from cli.tools.base import Result, Tool, ToolContext, failure
from cli.tools.definitions import (
    COMPACT_EDIT_FILE,
    COMPACT_LIST_DIRECTORY,
    COMPACT_READ_FILE,
    COMPACT_SEARCH_FILES,
    COMPACT_WRITE_FILE,
    CREATE_DIRECTORY,
    DELETE_FILE,
    EDIT_FILE,
    GIT_DIFF,
    GIT_STATUS,
    LIST_DIRECTORY,
    MOVE_FILE,
    READ_FILE,
    RUN_COMMAND,
    SEARCH_FILES,
    WRITE_FILE,
)
from cli.tools.schema import SchemaError, validate_arguments

ALL_TOOLS: Mapping[str, Tool] = {
    t.name: t
    for t in (
        READ_FILE,
        EDIT_FILE,
        WRITE_FILE,
        LIST_DIRECTORY,
        SEARCH_FILES,
        CREATE_DIRECTORY,
        MOVE_FILE,
        DELETE_FILE,
        RUN_COMMAND,
        GIT_STATUS,
        GIT_DIFF,
    )
}
assert tuple(ALL_TOOLS) == TOOL_NAMES, "the policy and the registry must know the same tools"

# The compact tool set (agent.tool_set: compact): read, list, search, write and edit, with
# short descriptions and fewer parameters, in the full set's order.
COMPACT_TOOLS: Mapping[str, Tool] = {
    t.name: t
    for t in (
        COMPACT_READ_FILE,
        COMPACT_EDIT_FILE,
        COMPACT_WRITE_FILE,
        COMPACT_LIST_DIRECTORY,
        COMPACT_SEARCH_FILES,
    )
}


def check_arguments(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Validate against the same schema the model was sent; raise SchemaError."""
    return validate_arguments(arguments, ALL_TOOLS[name].parameters)


def run_tool(
    tool: Tool,
    ctx: ToolContext,
    arguments: Mapping[str, Any],
    paths: Mapping[str, ResolvedPath],
) -> Result:
    """Run a tool under a deadline of its own (policy.limits.tool_seconds from now: see
    cli/fs/deadline.py); an expected failure, running out of time included, becomes
    `{"success": false, "error": ...}`."""
    try:
        return tool.run(ctx.started(tool.name), arguments, paths)
    except ToolError as exc:
        return failure(str(exc), exc.hint)


def execute(
    name: str,
    ctx: ToolContext,
    arguments: Mapping[str, Any],
    paths: Mapping[str, ResolvedPath],
) -> Result:
    """Run the registered tool `name`."""
    return run_tool(ALL_TOOLS[name], ctx, arguments, paths)


__all__ = [
    "ALL_TOOLS",
    "COMPACT_TOOLS",
    "Result",
    "SchemaError",
    "Tool",
    "ToolContext",
    "check_arguments",
    "execute",
    "run_tool",
]
