"""`agent mcp import FILE --into CONFIG`: the imported servers written into the config file
itself, as text, so that everything else in it stays as it was: comments, key order, quoting,
the other keys. The servers go at the end of `mcp.servers` (made if missing: after `mcp:`, or
a new `mcp:` at the end of the file); `servers: {}` (as `agent init` writes it) becomes a
block. The result is checked before it is written: it must load as a config does, with the
same settings as before plus the new servers, or nothing is written. A name already in
`mcp.servers` is refused, naming it: nothing is replaced. Lines are split at \n only (not at
U+2028, NEL…), and each line keeps its own ending (\n or \r\n); a comment, at any column,
never ends a block.

Written atomically (a temp file renamed over the config, its mode kept; through a symlink to
the file it names, so a dotfiles link stays a link); a new file is 0600 from its creation.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cli.errors import ConfigError, UsageError
from cli.fs.stored import MAX_CONFIG_BYTES, Unreadable, read_capped

_TOP_KEY = re.compile(r"[^\s#]")  # a line that starts a top-level key (or other content)
_MCP = re.compile(r"mcp\s*:\s*(?P<rest>.*)$")
_SERVERS = re.compile(r"(?P<indent>[ ]+)servers\s*:\s*(?P<rest>.*)$")
_EMPTY_FLOW = re.compile(r"\{\s*\}\s*(?P<comment>#.*)?$")


@dataclass(frozen=True)
class Merged:
    text: str
    added: list[str]  # the server names written


def merge_servers(
    text: str, servers: dict[str, dict[str, Any]], comments: list[str], source: str
) -> Merged:
    """`text` (a config file's) with `servers` added under mcp.servers, each comment line
    before them. Raises UsageError on a name clash, or when the file's mcp section is
    written in a way this does not edit (a flow mapping such as `mcp: {servers: {…}}`)."""
    before = _load(text, source)
    existing = _servers_of(before)
    clash = [name for name in servers if name in existing]
    if clash:
        names = ", ".join(clash)
        raise UsageError(
            f"{source}: mcp.servers already has {names}; nothing was written (rename or "
            "remove it there, or edit the import by hand: `agent mcp import FILE` prints it)"
        )
    if not servers:
        return Merged(text, [])
    lines, endings = _split(text)
    newline = "\r\n" if "\r\n" in text else "\n"
    start, stop, new = _insert(lines, servers, comments, source)
    if start and not endings[start - 1]:  # a last line without its line break
        endings[start - 1] = newline
    out = "".join(
        [
            *(line + end for line, end in zip(lines[:start], endings[:start], strict=True)),
            *(line + newline for line in new),
            *(line + end for line, end in zip(lines[stop:], endings[stop:], strict=True)),
        ]
    )
    if not out.endswith("\n"):
        out += newline
    _check(before, _load_merged(out, source), servers, source)
    return Merged(out, list(servers))


def _split(text: str) -> tuple[list[str], list[str]]:
    """The lines and each one's own line break ("\r\n", "\n", or "" for a last line without
    one). Only these end a line here: str.splitlines() would also split at U+2028, NEL, \f…
    inside a comment, and put a line break into the file where there was none."""
    lines, endings = [], []
    chunks = text.split("\n")
    for n, chunk in enumerate(chunks):
        if chunk.endswith("\r") and n < len(chunks) - 1:
            lines.append(chunk[:-1])
            endings.append("\r\n")
        else:
            lines.append(chunk)
            endings.append("\n")
    endings[-1] = ""  # after the last \n (or a last line without one)
    if lines[-1] == "":
        lines.pop()
        endings.pop()
    return lines, endings


def _load(text: str, source: str) -> Any:
    """The file as our config loader reads it (it refuses duplicate keys), as plain data."""
    from cli.config.loading import parse_config

    try:
        parse_config(text, source)
    except ConfigError as exc:
        raise UsageError(f"{exc}; fix it first, nothing was written") from None
    return yaml.safe_load(text) or {}


def _load_merged(text: str, source: str) -> Any:
    """The merged text as the config loader reads it: an error here is ours, not the file's."""
    from cli.config.loading import parse_config

    try:
        parse_config(text, source)
    except ConfigError as exc:
        raise UsageError(
            f"{source}: adding the servers failed (the merged file would not load: {exc}); "
            "nothing was written, the file is fine as it is (paste what "
            "`agent mcp import FILE` prints by hand)"
        ) from None
    return yaml.safe_load(text) or {}


def _servers_of(data: Any) -> dict[str, Any]:
    mcp = data.get("mcp") if isinstance(data, dict) else None
    servers = mcp.get("servers") if isinstance(mcp, dict) else None
    return servers if isinstance(servers, dict) else {}


def _insert(
    lines: list[str], servers: dict[str, dict[str, Any]], comments: list[str], source: str
) -> tuple[int, int, list[str]]:
    """Where the servers go: lines[start:stop] replaced by the new lines."""
    mcp_at = next((i for i, line in enumerate(lines) if _MCP.match(line)), None)
    if mcp_at is None:  # no mcp section: a new one at the end
        body = ["mcp:", "  servers:", *_entries(servers, comments, 4)]
        kept = len(_trimmed(lines))
        return kept, len(lines), [*([""] if lines else []), *body]
    rest = _MCP.match(lines[mcp_at])
    assert rest is not None
    after_mcp = rest.group("rest").strip()
    end = _block_end(lines, mcp_at, 0)
    if after_mcp and not after_mcp.startswith("#"):
        empty = _EMPTY_FLOW.match(after_mcp)
        if empty is None:
            raise _unedited(source, "mcp")
        comment = f"  {empty.group('comment')}" if empty.group("comment") else ""
        body = ["mcp:" + comment, "  servers:", *_entries(servers, comments, 4)]
        return mcp_at, mcp_at + 1, body
    servers_at = next((i for i in range(mcp_at + 1, end) if _SERVERS.match(lines[i])), None)
    if servers_at is None:  # mcp without servers: a servers block first in it
        indent = _child_indent(lines, mcp_at, end) or 2
        body = [" " * indent + "servers:", *_entries(servers, comments, indent * 2)]
        return mcp_at + 1, mcp_at + 1, body
    m = _SERVERS.match(lines[servers_at])
    assert m is not None
    indent, after = len(m.group("indent")), m.group("rest").strip()
    if after and not after.startswith("#"):
        empty = _EMPTY_FLOW.match(after)
        if empty is None:
            raise _unedited(source, "mcp.servers")
        comment = f"  {empty.group('comment')}" if empty.group("comment") else ""
        head = " " * indent + "servers:" + comment
        body = [head, *_entries(servers, comments, indent * 2 if indent else 2)]
        return servers_at, servers_at + 1, body
    block_end = _block_end(lines, servers_at, indent)
    inner = _child_indent(lines, servers_at, block_end) or indent * 2
    last = max((i for i in range(servers_at, block_end) if lines[i].strip()), default=servers_at)
    return last + 1, last + 1, _entries(servers, comments, inner)


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The index after the block opened at `start`: before the first later key indented no
    more than `indent`. A comment does not end a block, whatever its column (YAML ignores
    it): one inside stays inside. Blank lines and comments no more indented than the block's
    key, just before what follows, belong to what follows (a heading for the next key)."""
    end = len(lines)
    for i in range(start + 1, len(lines)):
        stripped = lines[i].lstrip(" ")
        if stripped and not stripped.startswith("#") and len(lines[i]) - len(stripped) <= indent:
            end = i
            break
    while end > start + 1:
        stripped = lines[end - 1].lstrip(" ")
        shallow = len(lines[end - 1]) - len(stripped) <= indent
        if stripped and not (stripped.startswith("#") and shallow):
            break
        end -= 1
    return end


def _child_indent(lines: list[str], start: int, end: int) -> int:
    """The indentation of the first key in lines[start+1:end] (0: none)."""
    for line in lines[start + 1 : end]:
        stripped = line.lstrip(" ")
        if stripped and not stripped.startswith("#"):
            return len(line) - len(stripped)
    return 0


def _entries(servers: dict[str, dict[str, Any]], comments: list[str], indent: int) -> list[str]:
    pad = " " * indent
    body = yaml.safe_dump(servers, sort_keys=False, allow_unicode=True, width=1000)
    return [pad + c for c in comments] + [pad + line for line in body.splitlines()]


def _trimmed(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _unedited(source: str, key: str) -> UsageError:
    return UsageError(
        f"{source}: {key} is written on one line ({{…}}), which this does not edit; nothing "
        "was written (write it as a block, or paste what `agent mcp import FILE` prints)"
    )


def _check(before: Any, after: Any, servers: dict[str, dict[str, Any]], source: str) -> None:
    """The merged file must say what the old one said, plus the new servers: anything else
    (a layout this misread) is refused before a byte is written."""
    expected = dict(before) if isinstance(before, dict) else {}
    mcp = dict(expected.get("mcp") or {})
    mcp["servers"] = {**_servers_of(before), **yaml.safe_load(yaml.safe_dump(servers))}
    expected["mcp"] = mcp
    if after != expected:
        raise UsageError(
            f"{source}: could not add the servers without changing something else in it; "
            "nothing was written (paste what `agent mcp import FILE` prints by hand)"
        )


def read_config_text(path: str) -> str:
    """The config file's text ("" when it does not exist yet)."""
    try:
        return read_capped(Path(path), MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    except Unreadable as exc:
        raise UsageError(f"{path}: {exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None


def write_config(path: str, text: str) -> None:
    """Atomically, over the file a symlink names (the link stays), its mode kept; a new file
    is private (0600), in a directory made if missing."""
    from cli.fs import writing

    real = os.path.realpath(path)
    Path(real).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    writing.atomic_write(real, text.encode("utf-8"), new_mode=0o600)
