"""The redaction engine: what looks like a secret in a string (a token, a key, a password
after its flag or name, a credential header, a URL's password) replaced by "[redacted]",
keeping what is around it. Used by the audit log (cli/records/audit_events.py) and by
`agent mcp import` (cli/mcp/importing.py).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator

from cli.safety.sensitive import names_secret

REDACTED = "[redacted]"

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


def header_name(name: str) -> bool:
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
