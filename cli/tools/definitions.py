"""What the model is told about each built-in tool: its name, description and parameters.

They live here, apart from the code that does the work, because the first request sends
them all and the code is needed only when a tool runs: each tool's module (and what it
imports: the walk, rg, git, the sandbox) is imported at the tool's first call, not at
every start-up. cli/tools/__init__.py is the registry of these, in this order."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from cli.fs.paths import ResolvedPath
from cli.tools.base import Result, Runner, Tool, ToolContext, boolean, integer, params, string

DIFF_DEFAULT_BYTES = 30_000  # fits the default policy.limits.max_tool_result_chars (32k)
DIFF_MAX_BYTES = 1_000_000


def _deferred(module: str, function: str) -> Runner:
    """`module.function`, imported when the tool first runs."""
    found: list[Runner] = []

    def run(ctx: ToolContext, args: Mapping[str, Any], paths: Mapping[str, ResolvedPath]) -> Result:
        if not found:
            found.append(getattr(importlib.import_module(module), function))
        return found[0](ctx, args, paths)

    run.__qualname__ = run.__name__ = function
    run.__module__ = module
    return run


_PATHS = (
    "Paths in the lists are relative to the working directory (absolute outside it); "
    "secrets and blocked paths are never shown."
)


READ_FILE = Tool(
    "read_file",
    "Read a local text file. Returns its content, size and line count. Files over 1 MB and "
    "binary files are refused; at most 500 lines come back per call, use start_line/end_line "
    "for the rest.",
    params(
        ["path"],
        path=string("The file to read: absolute, or relative to the working directory."),
        encoding=string(
            "How to decode the file. Default: utf-8.", enum=["utf-8", "latin1", "base64"]
        ),
        start_line=integer("First line to return (1-based). Default: 1."),
        end_line=integer("Last line to return (inclusive). Default: start_line + 499."),
    ),
    _deferred("cli.tools.files", "read_file"),
)


EDIT_FILE = Tool(
    "edit_file",
    "Replace exact text in a file you have read: old_string (copied from read_file, without "
    "line numbers; include enough lines to be unique) becomes new_string. Cheaper and safer "
    "than rewriting the whole file with write_file.",
    params(
        ["path", "old_string", "new_string"],
        path=string("The file to edit: absolute, or relative to the working directory."),
        old_string=string("The exact text to replace, as the file holds it."),
        new_string=string("The text to put in its place (may be empty to delete)."),
        replace_all=boolean("Replace every occurrence, not just a unique one. Default: false."),
    ),
    _deferred("cli.tools.files", "edit_file"),
)


WRITE_FILE = Tool(
    "write_file",
    "Write text to a local file: creates it (and its parent directories) or replaces its whole "
    "content. Explain what you write and why before calling it.",
    params(
        ["path", "content"],
        path=string("The file to write: absolute, or relative to the working directory."),
        content=string("The complete new content of the file."),
        encoding=string("Encoding of the file. Only utf-8.", enum=["utf-8"]),
    ),
    _deferred("cli.tools.files", "write_file"),
)


LIST_DIRECTORY = Tool(
    "list_directory",
    "List a directory: names, types (file, directory, symlink), sizes and modification times. "
    "Symlinked directories are shown, not entered. At most 500 entries.",
    params(
        ["path"],
        path=string("The directory to list."),
        recursive=boolean("List subdirectories too (names become relative paths). Default: false."),
        max_depth=integer("How deep to go when recursive (1 = this directory only). Default: 3."),
        include_hidden=boolean("Include names starting with '.'. Default: false."),
        filter_extension=string("Only files with this extension, e.g. '.py'."),
    ),
    _deferred("cli.tools.listing", "list_directory"),
)


SEARCH_FILES = Tool(
    "search_files",
    "Search below a directory. For filenames, query is a glob ('*.py') or a part of the name; "
    "for contents, query is literal text (not a regex). Returns matching files with line, "
    "column and text of each match. Skips hidden, binary and dependency directories, and the "
    "content of files with hard links (read_file asks about those).",
    params(
        ["query"],
        path=string("The directory to search in. Default: the working directory.", default="."),
        query=string("A filename glob like '*.ts', or the text to find inside files."),
        search_type=string(
            "What to search: 'filename', 'content' or 'both'. Default: both.",
            enum=["filename", "content", "both"],
        ),
        case_sensitive=boolean("Match case exactly. Default: false."),
        max_results=integer("Stop after this many matches. Default: 50."),
        file_extensions={
            "type": "array",
            "items": {"type": "string"},
            "description": "Only search files with these extensions, e.g. ['.ts', '.js'].",
        },
    ),
    _deferred("cli.tools.search", "search_files"),
)


CREATE_DIRECTORY = Tool(
    "create_directory",
    "Create a directory, and its missing parents. Succeeds with created=false if it exists.",
    params(["path"], path=string("The directory to create.")),
    _deferred("cli.tools.files", "create_directory"),
)


MOVE_FILE = Tool(
    "move_file",
    "Rename or move a file or directory (within the allowed directories). The destination is "
    "the full new path. An existing destination is replaced only with overwrite=true.",
    params(
        ["source", "destination"],
        source=string("The file or directory to move."),
        destination=string("Its new path (not the directory to move it into)."),
        overwrite=boolean("Replace an existing file at destination. Default: false."),
    ),
    _deferred("cli.tools.moves", "move_file"),
)


DELETE_FILE = Tool(
    "delete_file",
    "Delete a file, a symlink, or a directory (recursive=true for a non-empty one). Always "
    "confirmed by the user. Explain why before calling it.",
    params(
        ["path"],
        path=string("The file or directory to delete."),
        recursive=boolean("Delete a directory and everything in it. Default: false."),
    ),
    _deferred("cli.tools.files", "delete_file"),
)


RUN_COMMAND = Tool(
    "run_command",
    "Run a shell command (/bin/sh -c) and return its stdout, stderr, exit code and duration. "
    "The user confirms every run. Never run destructive commands.",
    params(
        ["command"],
        command=string("The shell command to run."),
        cwd=string("Working directory for the command. Default: the agent's working directory."),
        timeout=integer("Timeout in milliseconds. Default: 30000. Max: 120000."),
    ),
    _deferred("cli.tools.shell", "run_command"),
)


GIT_STATUS = Tool(
    "git_status",
    "Show a git work tree's state: branch (null when detached, with the head commit), "
    "upstream, commits ahead/behind it, and the staged, unstaged, untracked and unmerged "
    f"files beneath path. {_PATHS} Read-only; never fetches.",
    params(
        [],
        path=string(
            "A directory or file inside the work tree; only changes beneath it are listed. "
            "Default: the working directory."
        ),
    ),
    _deferred("cli.tools.git", "git_status"),
)


GIT_DIFF = Tool(
    "git_diff",
    "Show a unified diff of the changes beneath path: unstaged (work tree against the "
    "index) by default, staged (index against HEAD) with staged: true. Headers name paths "
    f"relative to the repository root; `files` lists them. {_PATHS} Read-only; capped at "
    "max_bytes.",
    params(
        [],
        path=string("A directory or file inside the work tree. Default: the working directory."),
        staged=boolean("Diff staged changes (index against HEAD). Default: false."),
        max_bytes=integer(
            f"Most bytes of diff to return. Default: {DIFF_DEFAULT_BYTES}. Max: {DIFF_MAX_BYTES}."
        ),
    ),
    _deferred("cli.tools.git", "git_diff"),
)


# -- the compact set (agent.tool_set: compact, or a small model's profile) -------------------
# The same tools, run by the same code under the same policy, with fewer parameters and
# descriptions of a line: what a 135M-4B model can hold in view. Their cost against the full
# set's, in a real tokenizer's tokens, is in docs/eval.md.

COMPACT_READ_FILE = Tool(
    "read_file",
    "Read a text file, at most 500 lines a call.",
    params(
        ["path"],
        path=string("The file."),
        start_line=integer("First line to return (1-based)."),
        end_line=integer("Last line to return."),
    ),
    READ_FILE.run,
)

COMPACT_LIST_DIRECTORY = Tool(
    "list_directory",
    "List the files and folders in a directory.",
    params(
        ["path"],
        path=string("The directory, e.g. '.'."),
        recursive=boolean("Include subdirectories."),
    ),
    LIST_DIRECTORY.run,
)

COMPACT_SEARCH_FILES = Tool(
    "search_files",
    "Find files whose name or content contains the query.",
    params(
        ["query"],
        query=string("Text to find, or a filename glob like '*.py'."),
        path=string("The directory to search in.", default="."),
    ),
    SEARCH_FILES.run,
)

COMPACT_WRITE_FILE = Tool(
    "write_file",
    "Create a file, or replace its whole content.",
    params(["path", "content"], path=string("The file."), content=string("The new content.")),
    WRITE_FILE.run,
)

COMPACT_EDIT_FILE = Tool(
    "edit_file",
    "Replace old_string, copied exactly from the file, with new_string.",
    params(
        ["path", "old_string", "new_string"],
        path=string("The file."),
        old_string=string("The exact text to replace."),
        new_string=string("The text to put in its place."),
    ),
    EDIT_FILE.run,
)
