"""The audit log: one JSON line per tool call, chained by hashes so that edits show.

Append-only at `$XDG_STATE_HOME/metona-agent/audit.jsonl`. Each record carries the sha256 of
the line before it, so an edited, deleted or reordered line breaks the chain that
`agent audit verify` checks. That makes the log tamper-evident, not tamper-proof: nothing
here holds a key, so someone who rewrites the whole file can rebuild a valid chain, and
lines cut from the end leave no trace.

What a call carried is summarised before it reaches the disk: file contents and long strings
by size and sha256, anything that looks like a secret replaced by "[redacted]". What a tool
returned (file contents, command output) is never written, only its size and success.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import sys
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cli.backends.messages import JSONTooDeep, ToolCall, loads_json
from cli.config.settings import MCP_PREFIX, state_dir
from cli.fs import _platform, stored
from cli.loop import outcomes
from cli.loop.events import Event, Notice, ToolCallProposed, ToolDecided, ToolResult
from cli.loop.outcomes import Outcome
from cli.safety.sensitive import names_secret

GENESIS = "0" * 64  # the `prev` of the first record
REDACTED = "[redacted]"
MAX_STRING = 200  # longer strings are summarised by size and hash
MAX_KEPT = 2000  # paths and commands are kept whole up to this length
MAX_ARGUMENTS = 8192  # bytes of summarised arguments; beyond, the whole set is summarised
MAX_ERROR = 200

# Kept in the record however long they are (up to MAX_KEPT): what a reader of the log needs
# to know what was touched or run. Secrets inside them are still redacted.
_KEPT = frozenset({"path", "cwd", "command"})
# File contents in our tools' arguments, kept as size and sha256 only, however short (README
# promises contents stay out of the log): what write_file writes, and the text edit_file
# finds and puts in its place. A search's query is not content: it is kept as a command is.
_SUMMARISED = frozenset({"content", "old_string", "new_string"})

# -- redaction -------------------------------------------------------------------------------
#
# redact() makes a fixed series of passes over a string, each with patterns compiled here
# once. A pass replaces the named group `s` of each match (the value) by REDACTED and keeps
# the rest (the flag, the key, the header name, the URL's user and host), so the record still
# says what was run. No pattern can take more than linear time on what a model sends: each
# starts with a literal or after a lookbehind that excludes the characters it then repeats
# (so it never restarts inside a run it has scanned), a value is the last thing it matches
# (so the engine never backtracks into one), and a name is checked before its value is read
# (so a value is read once, not once per name in front of it).


class _Lazy:
    """A regex compiled when first used: this module is imported at every start, and Python
    compiles regexes in Python (the redaction patterns here cost some 15 milliseconds)."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(*self._args)
        return self._compiled

    def search(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.search(text, pos, endpos)

    def match(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.match(text, pos, endpos)

    def finditer(
        self, text: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(text, pos, endpos)

    def sub(self, replacement: str, text: str) -> str:
        return self.compiled.sub(replacement, text)


# HTTP headers whose whole value is a credential (X-Api-Key and the like name one anyway).
_NOT_ALNUM = _Lazy(r"[\W_]")
_HEADERS = r"(?:proxy-)?authori[sz]ation|(?:set-)?cookie"
_HEADER_NAMES = frozenset({"authorization", "proxyauthorization", "cookie", "setcookie"})
_AUTH_SCHEMES = r"(?:bearer|basic|digest|token|negotiate|ntlm|bot|apikey|key|aws4-hmac-sha256)"


def _header_name(name: str) -> bool:
    """`Authorization`, `Cookie` and the like: an argument so named is a credential."""
    return _NOT_ALNUM.sub("", name).lower().rstrip("s") in _HEADER_NAMES


# A value as a shell or a config file writes it: quoted (closed or not) or a bare word (up to
# a blank, a quote, a comma or a shell operator), and the quoted or bare parts glued to it
# (`abc"def"`), but not a quote that closes a string around the name (`'key=abc' next`).
_QUOTED = r"""(?:"(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?)"""
_BARE = r"""[^\s"'`;&|,<>]+"""
_VALUE = f"(?:{_QUOTED}|{_BARE})(?:(?=[\"'][\\w$]){_QUOTED}|{_BARE})*"
_FLAG_VALUE = r"(?![-\s])" + _VALUE  # after a blank: what follows a flag, unless a flag

_PRIVATE_KEY = _Lazy(
    r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----(?P<s>[\s\S]*?)"
    r"(?=-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)"  # or cut short
)
_HEADER = _Lazy(
    r"(?:(?<![\w-])|(?<=\\[nr]))(?:" + _HEADERS + r")[\"']?[ \t]*[:=][ \t]*[\"']?"
    r"(?:" + _AUTH_SCHEMES + r"[ \t]+)?"
    # to the end of the header: the closing quote, a line end (real or \r\n in a string)
    r"(?P<s>(?:[^\"'\r\n\\|&<>`]|\\(?![nr]))+)",
    re.IGNORECASE,
)
_URL_PASSWORD = _Lazy(  # scheme://user:password@host, up to the authority's last @
    r"(?<![\w+.-])[A-Za-z][\w+.-]*://[^\s/?#@:\"'<>]*:(?P<s>[^\s/?#\"'<>]+)@"
)
_URL_SECRET_PATH = _Lazy(  # webhooks whose path is the credential
    r"(?:hooks\.slack\.com/(?:services|workflows|triggers)/|discord(?:app)?\.com/api/webhooks/"
    r"[0-9]+/)(?P<s>[\w/-]+)"
)
_TOKEN = _Lazy(  # known token shapes, replaced whole
    r"(?<![A-Za-z0-9_-])(?P<s>"
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|gl(?:pat|ptt|dt|rt|cbt|ft|soat|oas|imt|agent)-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"  # Slack
    r"|sk-[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic (sk-ant-…), DeepSeek
    r"|npm_[A-Za-z0-9]{30,}"  # npm
    r"|pypi-[A-Za-z0-9_-]{32,}"  # PyPI, TestPyPI
    r"|(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}(?![A-Za-z0-9])"
    r"|AIza[A-Za-z0-9_-]{35}|ya29\.[A-Za-z0-9_-]{20,}|GOCSPX-[A-Za-z0-9_-]{20,}"  # Google
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{20,}"  # Stripe
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?"  # JWT
    r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"  # SendGrid
    r"|SK[0-9a-f]{32}(?![A-Za-z0-9])"  # Twilio API keys
    r"|hv[sbr]\.[A-Za-z0-9_-]{20,}"  # HashiCorp Vault
    r"|do[por]_v1_[a-f0-9]{64}"  # DigitalOcean
    r"|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"  # Shopify
    r"|dapi[a-f0-9]{32}"  # Databricks
    r"|AGE-SECRET-KEY-1[0-9A-Z]{58}"  # age
    r"|(?:bot)?[0-9]{6,12}:AA[A-Za-z0-9_-]{30,}"  # Telegram bots
    r")"
)
_BEARER = _Lazy(r"\bbearer[ \t]+(?P<s>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)

# Names followed by a value: the pattern ends where the value starts, and counts only if its
# group `k` names a secret (so a long value is scanned once, not once per name before it).
_AFTER_NAME = _Lazy(_VALUE)
_AFTER_FLAG = _Lazy(_FLAG_VALUE)
# NAME=value, NAME: value, "name": "value", --name=value, ?name=value&. A name that opens a
# quoted string ("password=" src/) has no value if the string closes right after the `=`.
_NAMED = _Lazy(
    r"(?:(?P<q>[\"'])|(?<![\w./\"'-]))(?P<k>[\w.-]+)(?(q)(?P<c>(?P=q))?)"
    r"[ \t]*(?:[:?+]?=+|:(?![:/]))[ \t]*(?(c)|(?(q)(?!(?P=q))))"
)
_FLAG = _Lazy(r"(?<![\w.-])(?P<k>--?[A-Za-z][\w.-]*)[ \t]+")  # --name value
_SETTING = _Lazy(  # `aws configure set NAME value`, `git config --global NAME value`
    r"(?<![\w.-])(?:set|setenv|config|configure)(?:[ \t]+--?[\w-]+(?:=\S*)?){0,3}[ \t]+"
    r"(?P<k>[^\s=\"'`;&|<>-][^\s=\"'`;&|<>]*)[ \t]+"
)
_NETRC = _Lazy(r"(?<![\w.-])login[ \t]+[^\s\"']+[ \t]+(?P<k>[\w.-]+)[ \t]+")
_XML = _Lazy(r"<(?P<k>[\w.:-]+)>")  # <password>value</password> (Maven, .NET)
_XML_TEXT = _Lazy(r"[^<]+")

# The passes, in order: a pattern with a group `s` to replace, or a pattern for a name and
# the pattern of the value after it.
_PASSES: tuple[tuple[_Lazy, _Lazy | None], ...] = (
    (_PRIVATE_KEY, None),
    (_HEADER, None),
    (_URL_PASSWORD, None),
    (_URL_SECRET_PATH, None),
    (_TOKEN, None),
    (_NAMED, _AFTER_NAME),
    (_FLAG, _AFTER_FLAG),
    (_SETTING, _AFTER_FLAG),
    (_NETRC, _AFTER_FLAG),
    (_XML, _XML_TEXT),
    (_BEARER, None),
)


# -- flags that are passwords only for some programs (`-p` is a port for ssh, a directory
# -- option for mkdir): looked for in the shell command (up to ; & | or a line end) that
# -- runs the program, after its name.


def _short(flags: str) -> _Lazy:
    """`-pSECRET` or `-p SECRET` (but not `-p -u …`)."""
    return _Lazy(r"(?<![\w-])-(?:" + flags + r")(?:[ \t]+(?![-\s]))?(?P<s>" + _VALUE + ")")


def _flag(flags: str, pattern: str) -> _Lazy:
    """`--user bob:SECRET`, `--user=bob:SECRET`, `-ubob:SECRET`, quoted or not."""
    return _Lazy(r"(?<![\w-])(?:" + flags + r")(?:[ \t]+|=)?[\"']?" + pattern)


_COMMAND = _Lazy(r"""(?:"(?:[^"\\]|\\[\s\S])*"?|'[^']*'?|\\[\s\S]|[^;&|\n"'\\])+""")
_PROGRAMS: tuple[tuple[tuple[str, ...], str | None, tuple[_Lazy, ...]], ...] = (
    # (names, a word that must follow the name, the password flags)
    (
        ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck"),
        None,
        (_short("p"),),  # -P is the port
    ),
    (("mysqlpump", "mysqlsh", "mariadb", "mariadb-dump", "mariadb-admin"), None, (_short("p"),)),
    (("sshpass", "twine"), None, (_short("p"),)),
    (
        ("docker", "podman", "buildah", "nerdctl", "oras", "helm", "skopeo", "crane", "oc"),
        "login",  # `docker run -p 8080:80` publishes a port
        (_short("p"),),
    ),
    (("regctl", "cf", "az"), "login", (_short("p"),)),
    (("redis-cli", "valkey-cli", "keydb-cli"), None, (_short("a"),)),
    (
        ("mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport"),
        None,
        (_short("p"),),
    ),
    (("sqlcmd", "bcp"), None, (_short("P"),)),
    (
        ("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd"),
        None,
        (_short("w"),),
    ),
    (("ssh-keygen",), None, (_short("N|P"),)),  # new and old passphrase
    (("zip", "unzip", "zipcloak"), None, (_short("P"),)),
    (("7z", "7za", "7zr"), None, (_short("p"),)),
    (("openssl",), None, (_short("k"),)),  # enc -k PASSWORD
    (("security",), None, (_short("w"),)),  # add-generic-password -w PASSWORD
    (
        ("curl",),
        None,
        (
            _flag(r"-u|-U|--user|--proxy-user", r"(?!-)[^\s:\"']*:(?P<s>[^\s\"']+)"),
            _flag(r"-E|--cert|--proxy-cert", r"[^\s:\"'-][^\s:\"']*:(?P<s>[^\s\"']+)"),
            _Lazy(r"(?<![\w-])(?:-b|--cookie)(?:[ \t]+|=)(?P<s>" + _FLAG_VALUE + ")"),
        ),
    ),
    (
        ("smbclient", "rpcclient", "smbget", "smbcacls", "smbmap", "net", "winexe"),
        None,
        (_flag(r"-U|--user", r"[^\s%\"'-][^\s%\"']*%(?P<s>[^\s\"']+)"),),  # -U user%password
    ),
    (("lftp",), None, (_flag(r"-u|--user", r"[^\s,\"'-][^\s,\"']*,(?P<s>[^\s\"']+)"),)),
    (
        ("keytool", "jarsigner"),
        None,
        (
            _Lazy(
                r"(?<![\w-])-(?:(?:src|dest)?(?:store|key)pass|new)(?![\w:-])[ \t]+"
                r"(?P<s>" + _VALUE + ")"
            ),
        ),
    ),
    (
        ("sqlplus", "rman", "expdp", "impdp", "sqlldr"),
        None,
        (_Lazy(r"(?<![\w/@.-])[A-Za-z_][\w$#]*/(?P<s>[^\s@/\"']+)(?=[@\s\"']|\Z)"),),
    ),
    (
        ("gh",),
        "secret",  # gh secret set NAME --body VALUE
        (_Lazy(r"(?<![\w-])(?:-b|--body)(?:[ \t]+|=)(?P<s>" + _FLAG_VALUE + ")"),),
    ),
    (
        ("kubectl", "oc"),
        "secret",  # kubectl create secret generic NAME --from-literal=KEY=VALUE
        (_flag("--from-literal", r"[^\s=\"']+=(?P<s>" + _VALUE + ")"),),
    ),
    (
        ("vault",),
        "login",  # vault login TOKEN
        (_Lazy(r"(?<![\w-])login(?:[ \t]+-\S+)*[ \t]+(?P<s>[^\s=\"'-][^\s=]*)(?=\s|\Z)"),),
    ),
)
# A program's name, alone or at the end of a path (/usr/bin/mysql); the character before it
# is checked apart (_IN_A_WORD), which lets the engine skip ahead to the names' first letters.
_PROGRAM = _Lazy(
    "(?:"
    + "|".join(sorted({re.escape(n) for names, _, _ in _PROGRAMS for n in names}, key=len)[::-1])
    + r")(?![\w.-])"
)
_IN_A_WORD = _Lazy(r"[\w.-]")
_RULES_OF: dict[str, tuple[int, ...]] = {
    name: tuple(i for i, (names, _, _) in enumerate(_PROGRAMS) if name in names)
    for names, _, _ in _PROGRAMS
    for name in names
}
_REQUIRED = {
    word: _Lazy(r"(?<![\w-])" + word + r"(?![\w-])")
    for word in {w for _, w, _ in _PROGRAMS if w is not None}
}


def redact(text: str) -> str:
    """`text` with everything that looks like a secret replaced by "[redacted]": the value
    goes, the flag, key, header name or URL host around it stays. Linear in len(text)."""
    for pattern, value in _PASSES:
        text = _replace(text, _matches(text, pattern, value))
    return _replace(text, _program_passwords(text))


def _matches(
    text: str,
    pattern: _Lazy,
    value: _Lazy | None = None,
    start: int = 0,
    end: int | None = None,
) -> Iterator[tuple[int, int]]:
    """The spans to redact in text[start:end]: group `s` of each match of `pattern`, or,
    with `value`, the value after each match whose group `k` names a secret. A match that
    does not count is looked at again from where its name starts, so that `x=api_key=…`
    still finds `api_key=…`."""
    position, stop = start, len(text) if end is None else end
    while True:
        found = pattern.search(text, position, stop)
        if found is None:
            return
        if value is None:
            yield found.span("s")
            position = max(found.end(), found.start() + 1)
            continue
        after = value.match(text, found.end(), stop) if names_secret(found["k"]) else None
        if after is None:
            position = max(found.start("k"), found.start() + 1)
            continue
        yield after.span()
        position = after.end()


def _program_passwords(text: str) -> Iterator[tuple[int, int]]:
    for command in _COMMAND.finditer(text):
        done: set[int] = set()
        for program in _PROGRAM.finditer(text, command.start(), command.end()):
            if program.start() and _IN_A_WORD.match(text, program.start() - 1):
                continue  # xmysql, my-docker, .docker
            for index in _RULES_OF[program.group()]:
                if index in done:
                    continue
                done.add(index)  # once per command: from the first time its name appears
                _, required, patterns = _PROGRAMS[index]
                after = program.end()
                if required and not _REQUIRED[required].search(text, after, command.end()):
                    continue
                for pattern in patterns:
                    yield from _matches(text, pattern, None, after, command.end())


def _replace(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with each span (in any order; overlapping ones merged) replaced by REDACTED."""
    pieces: list[str] = []
    last = 0
    for begin, finish in sorted(spans):
        if begin < last:  # overlaps the one before
            if finish > last:
                last = finish
            continue
        pieces += (text[last:begin], REDACTED)
        last = finish
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def digest(data: str | bytes) -> dict[str, Any]:
    """Size and sha256: enough to tell what was written without keeping it."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def summarise_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the log keeps them: contents and long strings as size and hash,
    secrets redacted."""
    summary = {redact(str(k)): _summarise(str(k), v) for k, v in arguments.items()}
    if len(canonical(summary)) > MAX_ARGUMENTS:
        return {"summarised": digest(canonical(summary))}
    return summary


def _summarise(key: str, value: Any) -> Any:
    if names_secret(key) or _header_name(key):
        return REDACTED
    if key in _SUMMARISED:
        # The hash is of the real content, so it can be compared with the file on disk.
        return digest(value if isinstance(value, str) else canonical(value))
    if isinstance(value, str):
        text = redact(value)
        limit = MAX_KEPT if key in _KEPT else MAX_STRING
        if len(text) <= limit:
            return text
        return {**digest(text), "start": text[:MAX_STRING]} if key in _KEPT else digest(text)
    if isinstance(value, Mapping):
        return {redact(str(k)): _summarise(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # An argv-style list: the item after a secret-named flag ("--password", "X") is one.
        flags = [
            isinstance(v, str) and v[:1] == "-" and "=" not in v and names_secret(v) for v in value
        ]
        return [
            REDACTED if i and flags[i - 1] else _summarise("", item) for i, item in enumerate(value)
        ]
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return _summarise(key, str(value))


def canonical(data: Any) -> str:
    """The one JSON spelling that is hashed: sorted keys, no spaces, ASCII only."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- writing ---------------------------------------------------------------------------------


def default_path(environ: Mapping[str, str]) -> Path:
    return state_dir(environ) / "audit.jsonl"


def new_session_id() -> str:
    return secrets.token_hex(6)


def session_log(environ: Mapping[str, str], cwd: str, name: str | None = None) -> AuditLog:
    """The log for one `agent run` or one `agent chat`, under the session's name as `agent
    sessions` lists it (a chat's time, `run-<time>`), or a fresh id without one. Logs written
    before carry the 12-hex-digit ids: the name is just another string in the chain."""
    return AuditLog(default_path(environ), name or new_session_id(), cwd=cwd)


def recent_sessions(path: Path, window: int = 65536) -> set[str]:
    """The session names of the records in the log's last `window` bytes (none if it cannot
    be read): a run's name must not be one of them, even when nothing was saved under it."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - window))
            chunk = file.read(window)
    except OSError:
        return set()
    names = set()
    for raw in chunk.split(b"\n"):
        try:
            record = loads_json(raw)
        except ValueError:  # the cut first line, a broken one: verify says which
            continue
        if isinstance(record, dict) and isinstance(record.get("session"), str):
            names.add(record["session"])
    return names


class AuditLog:
    """Appends one record per tool call to `path`. Never raises: a record that cannot be
    written leaves `error` set, and `warning()` says so once."""

    def __init__(
        self,
        path: Path,
        session_id: str,
        clock: Callable[[], float] = time.time,
        cwd: str | None = None,
    ) -> None:
        self.path = path
        self.session_id = session_id
        self.clock = clock
        self.cwd = cwd
        self.seq = 0
        self.error: str | None = None
        self._warned = False

    def record(self, event: ToolResult) -> bool:
        """Log a call that was decided and, if allowed, run; False if it could not be."""
        decided = event.decision
        happened = outcomes.outcome(decided, event.result)  # cli/loop/outcomes.py's words
        if happened == "allowed":
            error = None
        elif happened == "failed":
            error = str(event.result.get("error") or "failed")
        else:
            error = decided.reason
        fields = self._fields(event.call, decided, happened, error, event.duration)
        fields["result_bytes"] = len(canonical(dict(event.result)))
        exit_code = event.result.get("exitCode")
        if isinstance(exit_code, int) and not isinstance(exit_code, bool):
            fields["exit_code"] = exit_code
        return self._append(fields)

    def record_interrupted(self, event: ToolCallProposed | ToolDecided) -> bool:
        """Log a call that Ctrl-C cut short: before it was decided, or while it ran."""
        decided = event if isinstance(event, ToolDecided) else None
        error = "interrupted before it finished" if decided else "interrupted before a decision"
        return self._append(self._fields(event.call, decided, "interrupted", error, None))

    def warning(self) -> str | None:
        """The line to show the first time a record could not be written; then None."""
        if self.error is None or self._warned:
            return None
        self._warned = True
        return f"the audit log could not be written ({self.error}); tool calls go unrecorded"

    def _fields(
        self,
        call: ToolCall,
        decided: ToolDecided | None,
        outcome: Outcome,
        error: str | None,
        duration: float | None,
    ) -> dict[str, Any]:
        self.seq += 1
        decision = None if decided is None else "allow" if decided.allowed else "deny"
        server = {}
        if call.name.startswith(MCP_PREFIX):  # mcp__<server>__<tool>: which server it went to
            server = {"server": redact(call.name[len(MCP_PREFIX) :].split("__", 1)[0])[:100]}
        return {
            "time": _iso(self.clock()),
            "session": self.session_id,
            "seq": self.seq,
            "cwd": self.cwd,
            "tool": redact(call.name)[:100],
            "arguments": summarise_arguments(call.arguments),
            "decision": decision,
            "rule": outcomes.rule(decided) if decided else None,
            "approved_by": (decided.approved_by or None) if decided else None,
            "outcome": outcome,
            "error": redact(error)[:MAX_ERROR] if error else None,
            "duration_ms": None if duration is None else round(duration * 1000),
            **server,
        }

    def _append(self, fields: dict[str, Any]) -> bool:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            append_record(self.path, fields)
        except Exception as exc:  # the audit must never end a session: warn instead
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.error = f"{self.path}: {reason}"
            return False
        return True


def append_record(path: Path, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Chain `fields` to the last line of `path` and append it as one line; returns the
    record written. The lock makes "read the last line, append" one step, so agents
    running at once still build a single chain."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        _platform.lock_exclusive(fd)  # released when fd is closed
        last, complete = _last_line(fd)
        record = {**fields, "prev": GENESIS if last is None else last}
        record["hash"] = _sha256(canonical(record).encode("ascii"))
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=True) + "\n"
        # A line cut short by a crash stays broken (verify reports it); ours starts afresh.
        data = line.encode("ascii") if complete else b"\n" + line.encode("ascii")
        while data:
            data = data[os.write(fd, data) :]
        return record
    finally:
        os.close(fd)


def _last_line(fd: int) -> tuple[str | None, bool]:
    """The sha256 of the last line without its newline (None for an empty file), and whether
    the file ends with a newline. The line is found from the end and hashed in pieces, never
    held whole: a log someone gave a last line of a gigabyte costs time, not memory."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, True
    complete = os.pread(fd, 1, size - 1) == b"\n"
    end = size - 1 if complete else size
    start = end
    while start > 0:
        step = min(65536, start)
        newline = os.pread(fd, step, start - step).rfind(b"\n")
        if newline >= 0:
            start -= step - newline - 1
            break
        start -= step
    digest = hashlib.sha256()
    while start < end:
        piece = os.pread(fd, min(1 << 20, end - start), start)
        if not piece:
            break
        digest.update(piece)
        start += len(piece)
    return digest.hexdigest(), complete


def _iso(timestamp: float) -> str:
    moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def audited(events: Iterable[Event], log: AuditLog) -> Generator[Event, None, None]:
    """Pass `events` through unchanged, recording each tool call in `log` as its result goes
    by; a call cut short by Ctrl-C is recorded as interrupted. Closing this closes `events`,
    so the loop still tidies the conversation up. The first failed write adds a Notice."""
    iterator = iter(events)
    pending: ToolCallProposed | ToolDecided | None = None
    try:
        for event in iterator:
            if isinstance(event, (ToolCallProposed, ToolDecided)):
                pending = event
            elif isinstance(event, ToolResult):
                pending = None
                log.record(event)  # before the yield: a consumer's Ctrl-C cannot skip it
            yield event
            # After every event, not only a result: others record too (chat's @file).
            warning = log.warning()
            if warning:
                yield Notice(warning)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        if pending is not None:
            log.record_interrupted(pending)


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainCheck:
    """What `verify` found: how many records are intact, and the first break if any."""

    records: int
    line: int | None = None
    problem: str | None = None
    exists: bool = True  # False: no log yet (nothing was recorded), which is not a break

    @property
    def intact(self) -> bool:
        return self.problem is None


def verify(path: Path) -> ChainCheck:
    """Recompute every record's hash and every link; stops at the first break. A log that
    does not exist holds no records (it is created by the first tool call); raises OSError
    if it exists and cannot be read."""
    previous: bytes | None = None
    number = 0
    try:
        with open(path, "rb") as file:
            for number, raw in enumerate(stored.lines(file), 1):
                if raw is None:
                    cap = stored.size_text(stored.MAX_RECORD_BYTES)
                    return ChainCheck(number - 1, number, f"longer than {cap}: not a record")
                if not raw.endswith(b"\n"):
                    return ChainCheck(number - 1, number, "the last line is cut short (truncated?)")
                line = raw[:-1]
                problem = _check(line, previous, number)
                if problem:
                    return ChainCheck(number - 1, number, problem)
                previous = line
    except FileNotFoundError:
        return ChainCheck(0, exists=False)
    return ChainCheck(number)


def _check(line: bytes, previous: bytes | None, number: int) -> str | None:
    try:
        record = loads_json(line, stored.MAX_STORED_DEPTH)
    except JSONTooDeep:
        return f"nested deeper than {stored.MAX_STORED_DEPTH} levels: not a record (edited?)"
    except ValueError:
        return "not a JSON record (edited or cut short?)"
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), str) for k in ("hash", "prev")
    ):
        return "not an audit record: no hash or prev (edited?)"
    claimed = record.pop("hash")
    if _sha256(canonical(record).encode("ascii")) != claimed:
        return "hash does not match its content (edited?)"
    if previous is None and record["prev"] != GENESIS:
        return "prev is not the start of a chain (lines deleted from the top?)"
    if previous is not None and record["prev"] != _sha256(previous):
        return f"prev does not match line {number - 1} (deleted or reordered?)"
    return None


def tail(path: Path, count: int) -> list[tuple[int, dict[str, Any] | None]]:
    """The last `count` lines as (line number, record), None for a line that is not one.
    Raises OSError if the file cannot be read."""
    last: deque[tuple[int, dict[str, Any] | None]] = deque(maxlen=count)
    with open(path, "rb") as file:
        for number, raw in enumerate(stored.lines(file), 1):
            try:
                record = None if raw is None else stored.parse_json(raw)
            except stored.Unreadable:  # too deep, or not JSON: verify says which
                record = None
            last.append((number, record if isinstance(record, dict) else None))
    return list(last)
