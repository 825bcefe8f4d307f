"""The Seatbelt profile (cli/safety/sandbox/seatbelt.py), pinned on any OS: golden files for a set
of policies, structural checks read off the parsed profile, the launch and the choice of
sandbox. What the profile does on a real Mac: tests/safety/test_seatbelt_macos.py.

The golden files are tests/golden/seatbelt/<case>.sb: the profile exactly as sandbox-exec
gets it, then its parameters as comments (JSON strings, so ASCII on one line each). After a
deliberate change, regenerate them and review the diff:

    METONA_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/safety/test_seatbelt_profile.py -q
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.config.loading import parse_config
from cli.config.settings import LimitsConfig, McpServerConfig, PolicyConfig
from cli.mcp.protocol import McpError
from cli.mcp.servers import confined
from cli.safety.policy import Policy
from cli.safety.sandbox import launch, seatbelt_grants
from cli.safety.sandbox.launch import choose
from cli.safety.sandbox.seatbelt import (
    SANDBOX_EXEC,
    SYSTEM_SECRETS,
    Grants,
    Profile,
    fold_regex,
    profile,
)
from cli.safety.sandbox.spec import SandboxSpec, SandboxUnavailable
from cli.tools import ToolContext, ToolError
from cli.tools.shell import run_command_in

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "seatbelt"
UPDATE = os.environ.get("METONA_UPDATE_GOLDEN") == "1"

HOME = "/Users/me"
TMP = "/private/var/tmp/metona-agent-cmd-abc123"
SECRETS = (f"{HOME}/.ssh", f"{HOME}/.aws", f"{HOME}/.netrc", f"{HOME}/.config/gh")


def grants(home: str = HOME, **changes: Any) -> Grants:
    """The grants of a usual run: ~/proj allowed, git's settings and a toolchain shown, .git
    read-only, a secret in the project, the agent's state blocked."""
    proj = f"{home}/proj"
    base = Grants(
        home=home,
        writable=(proj,),
        tmp=TMP,
        readable=(f"{home}/.gitconfig", f"{home}/.cargo", "/opt/homebrew/Cellar/python@3.12"),
        read_only=(f"{proj}/.git", f"{proj}/.github/workflows", f"{home}/.config/metona-agent"),
        pinned=(f"{proj}/.github",),
        closed=(),
        hidden=(
            *(s.replace(HOME, home) for s in SECRETS),
            f"{proj}/config/deploy.pem",
            f"{home}/.local/state/metona-agent",
            "/etc",
            "/private/etc",
            "/dev",
        ),
    )
    return dataclasses.replace(base, **changes)


HOSTILE = '/Users/o\'brien "q" (x) \\y\nz;#|"'
CASES: dict[str, Grants] = {
    "default": grants(),
    "network": grants(network=True),
    "read_only_dirs": grants(
        readable=(*grants().readable, "/Volumes/tools", f"{HOME}/shared"),
        hidden=(*grants().hidden, f"{HOME}/shared/.netrc", "/Volumes/tools/run/daemon.sock"),
    ),
    "hostile_path": grants(HOSTILE),
    "home_with_spaces": grants("/Users/Jane Doe"),
    "case_sensitive_volume": grants(fold_case=False),
    "non_ascii_home": grants("/Users/Jos\u00e9"),
    "writable_home": grants(
        writable=(HOME,),
        read_only=(f"{HOME}/.gitconfig", f"{HOME}/.cargo", f"{HOME}/.config/metona-agent"),
        pinned=(f"{HOME}/.config",),
        closed=(HOME,),
        hidden=(*grants().hidden, f"{HOME}/.bashrc", f"{HOME}/.docker"),
    ),
}


def rendered(p: Profile) -> str:
    params = "".join(f"; {name} = {json.dumps(value)}\n" for name, value in p.params)
    return f"{p.text}\n;; parameters (-DNAME=VALUE), not part of the profile:\n{params}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_profile_matches_its_golden_file(case: str) -> None:
    text = rendered(profile(CASES[case]))
    path = GOLDEN / f"{case}.sb"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="ascii")
    assert path.exists(), f"no golden file {path}: run with METONA_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="ascii"), f"{case}: regenerate and review the diff"


def test_every_case_has_a_golden_file_and_no_file_is_stale() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.sb")) == sorted(CASES)


# -- reading a profile back -----------------------------------------------------------------------

_TOKEN = re.compile(r'\s+|;[^\n]*|\(|\)|#"(?:[^"\\]|\\.)*"|"(?:[^"\\]|\\.)*"|[^\s()";]+')


def parse(text: str) -> list[Any]:
    """SBPL's forms as nested lists; strings as ("str", value); a stray character fails."""
    stack: list[list[Any]] = [[]]
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        assert match, f"unreadable at {text[position : position + 40]!r}"
        token = match.group()
        position = match.end()
        if token.isspace() or token.startswith(";"):
            continue
        if token == "(":
            stack.append([])
        elif token == ")":
            done = stack.pop()
            stack[-1].append(done)
        elif token.startswith(('"', '#"')):
            stack[-1].append(("str", token[token.index('"') + 1 : -1]))
        else:
            stack[-1].append(token)
    assert len(stack) == 1, "unbalanced parentheses"
    return stack[0]


@dataclasses.dataclass
class Rule:
    action: str  # allow | deny
    ops: list[str]
    filters: list[tuple[str, str]]  # (kind, value): ("subpath", "/Users/me/proj")…


def rules(p: Profile) -> list[Rule]:
    """The profile's rules in order, each filter with its parameter resolved."""
    params = dict(p.params)
    out = []
    for form in parse(p.text)[2:]:
        action, *rest = form
        ops = [x for x in rest if isinstance(x, str)]
        filters = []
        for f in (x for x in rest if isinstance(x, list)):
            kind, *args = f
            if kind in ("local", "remote"):  # (remote unix-socket (subpath …)), (remote ip "…")
                kind, *args = args[1] if args[0] == "unix-socket" else args
            value = args[-1]
            if isinstance(value, list) and value[0] == "param":
                value = params[value[1][1]]
            elif isinstance(value, tuple):
                value = value[1]
            filters.append((kind, str(value)))
        out.append(Rule(action, ops, filters))
    return out


def decides(p: Profile, op: str, path: str) -> str:
    """allow | deny for `op` on `path`, as Seatbelt decides: the last rule that matches,
    else the default (deny). Only what the profile uses: subpath, literal, regex."""
    verdict = "deny"
    for rule in rules(p):
        if not any(_op_covers(o, op) for o in rule.ops):
            continue
        if any(_matches(kind, value, path) for kind, value in rule.filters):
            verdict = rule.action
    return verdict


def _op_covers(pattern: str, op: str) -> bool:
    return pattern == op or (pattern.endswith("*") and op.startswith(pattern[:-1]))


def _matches(kind: str, value: str, path: str) -> bool:
    if kind == "subpath":
        return path == value or path.startswith(value.rstrip("/") + "/")
    if kind in ("literal", "path-literal"):
        return path == value
    if kind == "regex":
        return re.search(value, path) is not None
    return False


# -- the structure -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_profile_denies_by_default_first_and_is_one_ascii_text(case: str) -> None:
    p = profile(CASES[case])
    forms = parse(p.text)
    assert forms[:2] == [["version", "1"], ["deny", "default"]]
    assert p.text.isascii()
    unfiltered = {f[1] for f in forms[2:] if f[0] == "allow" and len(f) == 2}
    # An allow without a filter allows that operation everywhere: only these may be so.
    assert unfiltered == {"process-fork", "process-exec", "mach-host*", "ipc-posix-sem"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_allowed_dir_and_the_temp_dir_are_writable(case: str) -> None:
    g = CASES[case]
    p = profile(g)
    for root in (*g.writable, g.tmp):
        for path in (root, f"{root}/src/main.py", f"{root}/new dir/x"):
            assert decides(p, "file-write-data", path) == "allow", path
            assert decides(p, "file-read-data", path) == "allow", path


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_secret_or_blocked_dir_is_readable_or_writable(case: str) -> None:
    g = CASES[case]
    p = profile(g)
    hidden = [h for h in g.hidden if h not in ("/etc", "/private/etc", "/dev")]
    for secret in (*hidden, *SYSTEM_SECRETS):
        for path in (secret, f"{secret}/id_rsa"):
            for op in ("file-read-data", "file-write-data", "file-write-unlink", "process-exec"):
                assert decides(p, op, path) == "deny", (op, path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_stays_read_only_cannot_be_written_removed_or_renamed(case: str) -> None:
    g = CASES[case]
    p = profile(g)
    for path in g.read_only:
        for target in (path, f"{path}/hooks/pre-commit"):
            assert decides(p, "file-write-data", target) == "deny", target
            assert decides(p, "file-write-unlink", target) == "deny", target
            assert decides(p, "file-write-create", target) == "deny", target
    for holder in (*g.pinned, *g.writable):
        assert decides(p, "file-write-unlink", holder) == "deny", holder
    for closed in g.closed:
        assert decides(p, "file-write-create", f"{closed}/.new-dot-entry") == "deny"
        assert decides(p, "file-write-data", f"{closed}/proj/file") == "allow"


def test_the_system_and_the_view_are_read_only() -> None:
    g = CASES["read_only_dirs"]
    p = profile(g)
    for path in ("/usr/bin/git", "/bin/sh", "/System/Library/Frameworks/x", "/private/etc/hosts"):
        assert decides(p, "file-read-data", path) == "allow", path
        assert decides(p, "file-write-data", path) == "deny", path
    for shown in g.readable:
        assert decides(p, "file-read-data", f"{shown}/lib/x") == "allow"
        assert decides(p, "file-write-data", f"{shown}/lib/x") == "deny"
    masked = f"{HOME}/shared/.netrc"
    assert decides(p, "file-read-data", masked) == "deny"


def test_nothing_else_of_the_disk_is_readable() -> None:
    p = profile(CASES["default"])
    for path in (
        f"{HOME}/other/notes.txt",
        f"{HOME}/Library/Keychains/login.keychain-db",
        "/Users/other/.ssh/id_rsa",
        "/System/Volumes/Data/Users/me/.ssh/id_rsa",  # the data volume's other name
        "/private/tmp/com.apple.launchd.x/Listeners",
        "/private/var/folders/xy/abc/T/other-app",
        "/Volumes/Backup/me",
    ):
        assert decides(p, "file-read-data", path) == "deny", path
    assert decides(p, "file-read-metadata", HOME) == "allow"  # $HOME exists, empty
    assert decides(p, "file-read-data", HOME) == "deny"


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_network_unless_the_policy_allows_it(case: str) -> None:
    g = CASES[case]
    p = profile(g)
    network = [r for r in rules(p) if r.action == "allow" and any("network" in o for o in r.ops)]
    if g.network:
        assert ("ip", "*:*") in {f for r in network for f in r.filters}
        return
    # Without it, only Unix sockets the command makes in its own temp dir.
    assert network and all(f == ("subpath", g.tmp) for r in network for f in r.filters)
    assert "(allow network*" not in p.text and "(remote ip" not in p.text
    assert decides(p, "network-outbound", "/private/var/run/mDNSResponder") == "deny"
    assert decides(p, "network-outbound", f"{HOME}/.docker/run/docker.sock") == "deny"


# -- paths that would break a profile -----------------------------------------------------------


def test_a_hostile_path_changes_no_character_of_the_profile() -> None:
    """Quotes, parentheses, a backslash, a newline, `;` and `#|`: the paths go in parameters,
    so the text is that of a plain home, and each parameter holds the path unchanged."""
    hostile, plain = profile(CASES["hostile_path"]), profile(grants("/Users/plain"))
    assert hostile.text == plain.text
    assert dict(hostile.params)["P1"] == HOSTILE  # the home, second on the way in
    assert f"{HOSTILE}/proj" in dict(hostile.params).values()
    argv = hostile.argv(["/bin/sh", "-c", "true"])
    assert argv[:3] == [SANDBOX_EXEC, "-p", hostile.text]
    assert f"-DP1={HOSTILE}" in argv and argv[-4:] == ["--", "/bin/sh", "-c", "true"]


def test_hostile_regexes_match_only_their_path() -> None:
    p = profile(CASES["hostile_path"])
    assert decides(p, "file-read-data", f"{HOSTILE}/.ssh/id_rsa") == "deny"
    assert decides(p, "file-write-data", f"{HOSTILE}/proj/a.txt") == "allow"
    near = HOSTILE.replace("(x)", "x")  # what an unescaped group would have matched
    assert decides(p, "file-write-data", f"{near}/proj/a.txt") == "deny"


@pytest.mark.parametrize("bad", ["relative/path", "/a/../b", "//net/x", "/a/b/", "/a\0b"])
def test_a_path_that_is_not_absolute_and_normal_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        profile(grants(hidden=(bad,)))


def test_case_and_normalisation_variants_of_a_secret_are_denied() -> None:
    p = profile(CASES["default"])
    variants = (f"{HOME}/.SSH/id_rsa", f"{HOME}/.Ssh/ID_RSA", "/USERS/ME/.ssh", "/users/me/.AWS")
    for variant in variants:
        assert decides(p, "file-read-data", variant) == "deny", variant
    assert decides(p, "file-write-data", f"{HOME}/proj/.GIT/config") == "deny"
    accented = profile(CASES["non_ascii_home"])
    nfd = "/Users/Jose\u0301/.ssh/id_rsa"
    assert decides(accented, "file-read-data", nfd) == "deny"
    assert decides(accented, "file-write-data", "/Users/Jose\u0301/proj/x") == "allow"
    assert decides(accented, "file-write-data", "/Users/JOS\u00e9/.ssh/x") == "deny"


def test_a_case_sensitive_volume_gets_no_folding_regex() -> None:
    p = profile(CASES["case_sensitive_volume"])
    assert "(regex (param" not in p.text
    assert decides(p, "file-read-data", f"{HOME}/.ssh/id_rsa") == "deny"


def test_fold_regex_is_a_regex_of_the_path_alone() -> None:
    body = fold_regex("/a.b/(c)+[d]")
    assert re.fullmatch(body, "/A.B/(C)+[D]") and not re.fullmatch(body, "/aXb/(c)+[d]")
    assert not re.fullmatch(body, "/a.b/cc[d]")


# -- what the launch gathers -------------------------------------------------------------------


def machine(tmp_path: Path) -> tuple[Path, Path]:
    home = (tmp_path / "home").resolve()
    ws = home / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "config").mkdir()
    (ws / "config" / "deploy.pem").write_text("key\n")
    (ws / ".github" / "workflows").mkdir(parents=True)
    (home / ".ssh").mkdir()
    (home / ".gitconfig").write_text("[user]\n")
    return home, ws


def spec_of(home: Path, ws: Path, allowed: Path | None = None, **policy: Any) -> SandboxSpec:
    policy.setdefault("allowed_dirs", [str(allowed or ws)])
    resolved = Policy(
        PolicyConfig(**policy),
        cwd=str(ws),
        home=str(home),
        private_dirs=[str(home / ".local" / "state" / "metona-agent")],
    )
    return SandboxSpec(
        "seatbelt", resolved.allowed_dirs, resolved.blocked_dirs, str(home), resolved.classes
    )


def test_grants_come_from_the_same_view_and_scan_as_bubblewraps(tmp_path: Path) -> None:
    home, ws = machine(tmp_path)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "config" / "dev.sock"))
    try:
        g = seatbelt_grants.seatbelt_grants(spec_of(home, ws), "/usr/bin:/bin", str(tmp_path / "t"))
    finally:
        sock.close()
    assert g.writable == (str(ws),) and g.home == str(home)
    assert str(home / ".gitconfig") in g.readable
    assert {str(ws / ".git"), str(ws / ".github" / "workflows")} <= set(g.read_only)
    for name in ("config/deploy.pem", "config/dev.sock"):
        assert str(ws / name) in g.hidden
    for path in (home / ".ssh", home / ".netrc", home / ".local" / "state" / "metona-agent"):
        assert str(path) in g.hidden  # whether or not it exists
    # A rename of config/ or .github/ would carry what they hold out of its rule.
    assert {str(ws / "config"), str(ws / ".github")} <= set(g.pinned)
    assert g.network is False
    p = profile(g)
    assert decides(p, "file-read-data", str(ws / "config" / "deploy.pem")) == "deny"
    assert decides(p, "file-write-unlink", str(ws / "config")) == "deny"
    assert decides(p, "file-write-data", str(ws / "config" / "app.yaml")) == "allow"


def test_a_writable_home_is_closed_to_new_entries_and_its_dot_entries_are_hidden(
    tmp_path: Path,
) -> None:
    home, ws = machine(tmp_path)
    (home / ".bashrc").write_text("# rc\n")
    g = seatbelt_grants.seatbelt_grants(
        spec_of(home, ws, home), "/usr/bin:/bin", str(tmp_path / "t")
    )
    assert str(home) in g.closed
    assert str(home / ".bashrc") in g.hidden
    assert str(home / ".gitconfig") in g.read_only and str(home / ".gitconfig") not in g.hidden
    p = profile(g)
    assert decides(p, "file-read-data", str(home / ".bashrc")) == "deny"
    assert decides(p, "file-read-data", str(home / ".gitconfig")) == "allow"
    assert decides(p, "file-write-data", str(home / ".gitconfig")) == "deny"
    assert decides(p, "file-write-create", str(home / ".pdbrc")) == "deny"
    assert decides(p, "file-write-data", str(ws / "new.txt")) == "allow"


def test_the_disk_is_asked_whether_it_folds_case(tmp_path: Path) -> None:
    probe = tmp_path / "CaseProbe"
    probe.mkdir()
    try:
        (tmp_path / "cASEpROBE").mkdir()
        sensitive = True
    except FileExistsError:
        sensitive = False
    assert seatbelt_grants._folds_case(str(probe)) is (not sensitive)


def test_the_launch_runs_sandbox_exec_through_the_limits(tmp_path: Path) -> None:
    home, ws = machine(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    limits = LimitsConfig(command_cpu_seconds=7)
    spec = spec_of(home, ws)
    made = launch.prepare(spec, "echo hi", str(ws), env, limits, ("seatbelt",), "darwin")
    try:
        assert made.kind == "seatbelt" and made.scratch and os.path.isdir(made.scratch)
        assert made.argv[:2] == [SANDBOX_EXEC, "-p"]
        assert made.argv[-4:] == ["--", "/bin/sh", "-c", "echo hi"]
        defines = [a.split("=", 1)[1] for a in made.argv if a.startswith("-DP")]
        assert str(ws) in defines and os.path.realpath(made.scratch) in defines
        plan = json.loads(made.plan)
        assert plan["rlimits"]["cpu"] == 7 and plan["landlock"] is None
        tmp = os.path.realpath(made.scratch)
        assert made.env["TMPDIR"] == tmp and plan["env"]["TMPDIR"] == tmp
        assert made.env["GOCACHE"].startswith(tmp + "/")
    finally:
        launch.cleanup(made)
    assert not os.path.exists(made.scratch)


def test_auto_is_seatbelt_on_macos_and_bubblewrap_or_landlock_on_linux() -> None:
    assert choose("auto", ("seatbelt",), "darwin") == "seatbelt"
    assert choose("auto", ("bwrap", "landlock", "seatbelt"), "linux") == "bwrap"
    assert choose("seatbelt", ("seatbelt",), "darwin") == "seatbelt"
    with pytest.raises(SandboxUnavailable, match="macOS's cannot run here"):
        choose("auto", (), "darwin")


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_seatbelt_elsewhere_is_one_line_saying_it_is_macos_only(platform: str) -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        choose("seatbelt", ("seatbelt", "bwrap"), platform)
    message = str(caught.value)
    assert "\n" not in message and "macOS" in message
    assert "policy.commands.sandbox: auto" in message


def test_linuxs_sandboxes_on_macos_say_what_to_use_instead() -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        choose("bwrap", ("bwrap",), "darwin")
    assert "on macOS set policy.commands.sandbox: seatbelt" in str(caught.value)


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS seatbelt runs")
def test_run_command_with_seatbelt_here_refuses_in_one_line(tmp_path: Path) -> None:
    home, ws = machine(tmp_path)
    ctx = ToolContext(cwd=str(ws), environ={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    with pytest.raises(ToolError) as caught:
        run_command_in(spec_of(home, ws), ctx, "touch ran.txt")
    assert "\n" not in str(caught.value) and "macOS" in str(caught.value)
    assert not (ws / "ran.txt").exists()


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS seatbelt runs")
def test_an_mcp_server_with_seatbelt_here_is_refused_in_one_line(tmp_path: Path) -> None:
    config = McpServerConfig(command="true", sandbox="seatbelt")
    with pytest.raises(McpError) as caught:
        confined(config, ["true"], {"PATH": "/usr/bin:/bin"}, str(tmp_path), SandboxSpec())
    assert "\n" not in str(caught.value) and "macOS" in str(caught.value)


def test_the_config_takes_seatbelt_for_commands_and_mcp_servers() -> None:
    text = (
        "policy:\n  commands:\n    sandbox: seatbelt\n"
        "mcp:\n  servers:\n    s:\n      command: x\n      sandbox: seatbelt\n"
    )
    config = parse_config(text, "test.yaml")
    assert config.policy.commands.sandbox == "seatbelt"
    assert config.mcp.servers["s"].sandbox == "seatbelt"
    assert SandboxSpec("seatbelt").mode == "seatbelt"


def test_the_approval_card_says_a_command_runs_under_seatbelt() -> None:
    from cli.ui.approval_card import Consequences

    mac = Consequences(sandbox_mode="auto", available=("seatbelt",), platform="darwin")
    assert mac.sandbox_line().plain == (
        "  runs in macOS's Seatbelt sandbox: no network, writes only in the allowed dirs"
    )
    linux = Consequences(sandbox_mode="seatbelt", available=("bwrap",), platform="linux")
    assert linux.sandbox_line().plain.startswith("  will not run: policy.commands.sandbox is")
    assert "macOS" in linux.sandbox_line().plain


def test_letters_the_disk_folds_to_ascii_are_denied_too() -> None:
    """Unicode case folding takes LATIN SMALL LETTER LONG S (U+017F) for `s` and KELVIN SIGN
    (U+212A) for `k`; a folding volume that uses it finds `.github/wor\u212aflows` for
    `.github/workflows`: the deny must match those spellings as well as ASCII's two cases.
    Other letters fold both ways as well (`CLÉ.pem` is `clé.pem`)."""
    p = profile(CASES["default"])
    for spelling in ("wor\u212aflows", "workflow\u017f", "WORKFLOW\u017f"):
        path = f"{HOME}/proj/.github/{spelling}/ci.yml"
        assert decides(p, "file-write-data", path) == "deny", spelling
    accented = profile(grants(hidden=(*grants().hidden, f"{HOME}/proj/cl\u00e9.pem")))
    assert decides(accented, "file-read-data", f"{HOME}/proj/CL\u00c9.pem") == "deny"
    assert p.text.isascii()
    body = fold_regex("/s/k")
    assert re.fullmatch(body, "/\u017f/\u212a") and not re.fullmatch(body, "/t/k")


@pytest.mark.parametrize("fold_case", [True, False], ids=["folding", "case_sensitive"])
def test_a_path_in_mixed_normal_forms_is_denied_too(fold_case: bool) -> None:
    """APFS ignores normalisation name by name, case-sensitive or not: `Jose\u0301/proj/clé.pem`
    (the home's name in NFD, the file's in NFC) opens the secret `José/proj/clé.pem`, which
    neither its all-NFC nor its all-NFD spelling matches."""
    home = "/Users/Jos\u00e9"
    secret = f"{home}/proj/cl\u00e9.pem"
    p = profile(grants(home, hidden=(*grants(home).hidden, secret), fold_case=fold_case))
    assert decides(p, "file-read-data", secret) == "deny"
    for mixed in ("/Users/Jose\u0301/proj/cl\u00e9.pem", "/Users/Jos\u00e9/proj/cle\u0301.pem"):
        assert decides(p, "file-read-data", mixed) == "deny", ascii(mixed)
        assert decides(p, "file-write-data", mixed) == "deny", ascii(mixed)
    assert decides(p, "file-write-data", f"{home}/proj/notes.txt") == "allow"
    assert p.text.isascii()
