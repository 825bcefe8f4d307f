"""run_command and stdio MCP servers under Seatbelt (cli/safety/sandbox/seatbelt.py) on a real
Mac: real sandbox-exec, real files, sockets and processes, with the adversarial corpora that
bubblewrap and Landlock face in tests/safety/test_sandbox.py, tests/safety/test_sandbox_view.py
and tests/adversarial/test_attack_view.py (the credential names and places, the daemon sockets,
the probes),
and the attacks a path-based sandbox invites besides (renaming what holds a rule, hard and
symbolic links, case variants).

macOS only: everywhere else every test here is skipped with the reason. The profile itself
is pinned on every OS by tests/safety/test_seatbelt_profile.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.config.settings import LimitsConfig, McpServerConfig, PolicyConfig
from cli.mcp.servers import confined
from cli.safety.policy import Policy
from cli.safety.sandbox import launch
from cli.safety.sandbox.seatbelt import SYSTEM_TREES
from cli.safety.sandbox.spec import SandboxSpec
from cli.tools import ToolContext
from cli.tools.shell import run_command_in
from tests.safety.test_sandbox import Listener
from tests.safety.test_sandbox_view import (
    CONNECT_ALL,
    CREDENTIALS,
    MARK,
    PLACES,
    READ_ALL,
    SOCKETS,
    Listeners,
)

pytestmark = pytest.mark.skipif(
    sys.platform != "darwin",
    reason="Seatbelt (sandbox-exec) is macOS's; its profile is pinned on every OS by "
    "tests/safety/test_seatbelt_profile.py",
)

SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


def python() -> str:
    """An interpreter every sandboxed command can see: in a system tree (Homebrew's, the
    python.org framework's, or the developer tools' behind /usr/bin/python3)."""
    for candidate in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        if any(candidate.startswith(t + "/") for t in SYSTEM_TREES) and os.path.exists(candidate):
            return candidate
    pytest.skip("no Python interpreter in a system tree for the probes")


@pytest.fixture(autouse=True)
def _seatbelt_runs() -> None:
    problem = launch.seatbelt_problem()
    if problem:
        pytest.fail(f"sandbox-exec cannot run this profile on this Mac: {problem}")


@dataclasses.dataclass
class Mac:
    root: Path  # a fake machine's root under /var/tmp (/private/var/tmp)
    home: Path
    ws: Path  # the allowed dir, ~/ws
    outside: Path  # beside it, not allowed

    def spec(self, path_var: str = SYSTEM_PATH, **policy: Any) -> SandboxSpec:
        """The spec the wiring builds (cli/wiring.py sandbox_spec) for this $PATH."""
        policy.setdefault("allowed_dirs", [str(self.ws)])
        resolved = Policy(
            PolicyConfig(**policy), cwd=str(self.ws), home=str(self.home), path_var=path_var
        )
        return SandboxSpec(
            "seatbelt",
            resolved.allowed_dirs,
            resolved.blocked_dirs,
            str(self.home),
            resolved.classes,
        )

    def run(
        self,
        command: str,
        spec: SandboxSpec | None = None,
        *,
        path_var: str = SYSTEM_PATH,
        cwd: Path | None = None,
        environ: dict[str, str] | None = None,
        timeout_ms: int = 60_000,
        **limits: int,
    ) -> dict[str, Any]:
        env = {"PATH": path_var, "HOME": str(self.home), "LANG": "en_US.UTF-8", **(environ or {})}
        where = str(cwd or self.ws)
        ctx = ToolContext(cwd=where, limits=LimitsConfig(**limits), environ=env)
        result = run_command_in(spec or self.spec(), ctx, command, cwd=where, timeout_ms=timeout_ms)
        assert result["sandbox"] == "seatbelt"
        return result

    def probe(self, script: str, spec: SandboxSpec | None = None) -> Any:
        (self.ws / "probe.py").write_text(script)
        result = self.run(f"{python()} probe.py", spec)
        assert result["exitCode"] == 0, result
        return json.loads(result["stdout"])


@pytest.fixture
def mac() -> Iterator[Mac]:
    root = Path(tempfile.mkdtemp(prefix="metona-sb-", dir="/var/tmp")).resolve()
    home = root / "home"
    m = Mac(root, home, home / "ws", root / "outside")
    (m.ws / ".git" / "hooks").mkdir(parents=True)
    (m.ws / ".git" / "config").write_text("[core]\n")
    (m.ws / "main.py").write_text("print('hi')\n")
    (m.outside / "sub").mkdir(parents=True)
    (m.outside / "victim.txt").write_text("keep me\n")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text(MARK)
    (home / ".netrc").write_text(f"machine x login me password {MARK}\n")
    (home / ".bashrc").write_text("# rc\n")
    try:
        yield m
    finally:
        shutil.rmtree(root, ignore_errors=True)


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    out = {}
    for path in sorted([root, *root.rglob("*")]):
        if path.is_symlink():
            out[str(path)] = ("link", os.readlink(path))
        elif path.is_dir():
            out[str(path)] = ("dir", "")
        else:
            out[str(path)] = ("file", path.read_bytes().hex())
    return out


# -- the file system -----------------------------------------------------------------------------


def test_writing_inside_the_allowed_dir_works(mac: Mac) -> None:
    result = mac.run("echo made > new.txt && mkdir -p a/b && mv new.txt a/b/ && ls a/b")
    assert result["success"] is True, result
    assert (mac.ws / "a" / "b" / "new.txt").read_text() == "made\n"


def test_writing_outside_fails_and_changes_nothing(mac: Mac, tmp_path: Path) -> None:
    host_tmp = tmp_path / "host-tmp.txt"
    host_tmp.write_text("keep me\n")
    before = snapshot(mac.outside), snapshot(mac.home / ".ssh"), snapshot(tmp_path)
    for command in (
        f"echo x > {mac.outside}/victim.txt",
        f"echo x > {mac.outside}/planted.txt",
        f"rm -r {mac.outside}/sub",
        f"echo x >> {mac.home}/.bashrc",
        f"echo x > {mac.home}/.profile",
        f"echo x > {host_tmp}",
        "echo x > /tmp/metona-seatbelt-probe",
    ):
        assert mac.run(command)["success"] is False, command
    assert (snapshot(mac.outside), snapshot(mac.home / ".ssh"), snapshot(tmp_path)) == before
    assert (mac.home / ".bashrc").read_text() == "# rc\n" and not (mac.home / ".profile").exists()
    assert not os.path.exists("/tmp/metona-seatbelt-probe")


def test_the_git_dir_is_read_only_by_every_spelling_and_route(mac: Mac) -> None:
    for command in (
        "echo x >> .git/config",
        "echo x >> .GIT/config",
        "echo x >> .Git/CONFIG",
        "touch .git/hooks/pre-commit",
        "rm -rf .git",
        "mv .git git-moved",
        "mv .GIT git-moved",
    ):
        assert mac.run(command)["success"] is False, command
    assert (mac.ws / ".git" / "config").read_text() == "[core]\n"
    assert list((mac.ws / ".git" / "hooks").iterdir()) == []
    assert mac.run("cat .git/config")["stdout"] == "[core]\n"


def test_a_dir_holding_a_read_only_one_cannot_be_renamed_away(mac: Mac) -> None:
    (mac.ws / ".github" / "workflows").mkdir(parents=True)
    (mac.ws / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    result = mac.run(
        "mv .github gh && echo 'run: curl evil' >> gh/workflows/ci.yml && mv gh .github"
    )
    assert result["success"] is False
    assert (mac.ws / ".github" / "workflows" / "ci.yml").read_text() == "on: push\n"


def test_secrets_are_hidden_by_every_spelling(mac: Mac) -> None:
    for target in (".ssh/id_rsa", ".SSH/ID_RSA", ".Ssh/id_rsa", ".netrc", ".NETRC"):
        result = mac.run(f"cat {mac.home}/{target}")
        assert MARK not in result["stdout"] + result["stderr"], target
    grep = mac.run(f"grep -r {MARK} {mac.home} 2>/dev/null")
    assert MARK not in grep["stdout"]


def test_a_secret_in_the_allowed_dir_stays_hidden_when_renamed_or_linked(mac: Mac) -> None:
    (mac.ws / "config").mkdir()
    (mac.ws / "config" / "deploy.pem").write_text(MARK)
    for command in (
        "cat config/deploy.pem",
        "cat CONFIG/DEPLOY.PEM",
        "mv config cfg; cat cfg/deploy.pem",
        "mv config/deploy.pem notes.txt; cat notes.txt",
        "ln config/deploy.pem hard.txt; cat hard.txt",
        "ln -s config/deploy.pem soft.txt; cat soft.txt",
        "cp config/deploy.pem copy.txt; cat copy.txt",
    ):
        result = mac.run(command)
        assert MARK not in result["stdout"] + result["stderr"], (command, result)
    assert (mac.ws / "config" / "deploy.pem").read_text() == MARK


def test_a_secret_in_the_allowed_dir_stays_hidden_in_unicode_spellings(mac: Mac) -> None:
    """APFS ignores normalisation name by name, so a path may mix NFC and NFD; on a
    case-insensitive volume U+212A (KELVIN SIGN) may stand for `k` (Unicode case folding).
    Whether APFS opens the file by each spelling or not, the secret is never shown."""
    keys = mac.ws / "cl\u00e9s"
    keys.mkdir()
    (keys / "k\u00e9y.pem").write_text(MARK)
    for spelling in (
        "cle\u0301s/k\u00e9y.pem",
        "cl\u00e9s/ke\u0301y.pem",
        "CLE\u0301S/K\u00c9Y.PEM",
        "cl\u00e9s/\u212a\u00e9y.pem",
        "cle\u0301s/\u212ae\u0301y.pem",
    ):
        result = mac.run(f"cat '{spelling}'")
        assert MARK not in result["stdout"] + result["stderr"], (ascii(spelling), result)
    assert (keys / "k\u00e9y.pem").read_text() == MARK


def test_system_dirs_are_readable_but_not_writable(mac: Mac) -> None:
    result = mac.run("head -1 /etc/passwd >/dev/null && ls /usr/bin >/dev/null && echo ok")
    assert result["stdout"] == "ok\n", result
    assert mac.run("touch /etc/metona-probe")["success"] is False
    assert mac.run("touch /usr/local/metona-probe")["success"] is False
    assert mac.run("cat /Library/Keychains/System.keychain")["stdout"] == ""


def test_everyday_tools_work(mac: Mac) -> None:
    git = "git -c user.name=t -c user.email=t@example.com"
    result = mac.run(
        f"{git} init -q repo && cd repo && echo x > a && {git} add a && {git} commit -qm one "
        f"&& {git} log --oneline && {python()} -c 'import json, sqlite3; print(json.dumps(1))' "
        "&& mktemp && id -un && date +%Y >/dev/null && echo done"
    )
    assert result["exitCode"] == 0, result
    assert "one" in result["stdout"] and result["stdout"].endswith("done\n")


def test_a_hostile_or_spaced_path_is_an_allowed_dir_like_any_other(mac: Mac) -> None:
    for name in ('o\'brien "q" (x) \\y\nz;#|', "Jane Doe", "Jos\u00e9"):
        ws = mac.home / name
        ws.mkdir()
        spec = dataclasses.replace(mac.spec(), writable=(str(ws),))
        result = mac.run("echo ok > made.txt && cat made.txt", spec, cwd=ws)
        assert result["stdout"] == "ok\n", (name, result)
        assert mac.run(f"cat {mac.home}/.ssh/id_rsa", spec, cwd=ws)["stdout"] == ""


# -- the view (tests/safety/test_sandbox_view.py's corpora) ------------------------------


def plant(mac: Mac) -> list[str]:
    paths = []
    for place in PLACES:
        for name in CREDENTIALS:
            path = mac.root / place / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"secret={MARK}\n")
            paths.append(str(path))
    return paths


def test_no_credential_outside_the_allowed_dirs_is_readable(mac: Mac) -> None:
    planted = plant(mac)
    (mac.ws / "paths.json").write_text(json.dumps(planted))
    got = mac.probe(READ_ALL)
    assert [p for p, text in got.items() if MARK in text] == []
    assert len(got) == len(PLACES) * len(CREDENTIALS)


def connect_all(
    mac: Mac, paths: list[Path], spec: SandboxSpec | None = None
) -> tuple[dict[str, str], list[str]]:
    listeners = Listeners(paths)
    try:
        (mac.ws / "paths.json").write_text(json.dumps([str(p) for p in paths]))
        got = mac.probe(CONNECT_ALL, spec)
    finally:
        listeners.close()
    return got, listeners.hits


def test_no_socket_outside_the_allowed_dirs_is_reachable(mac: Mac) -> None:
    got, hits = connect_all(mac, [mac.root / rel for rel in SOCKETS])
    assert [p for p, how in got.items() if how == "connected"] == [] and hits == []


def test_a_socket_inside_the_allowed_dir_is_unreachable(mac: Mac) -> None:
    got, hits = connect_all(mac, [mac.ws / "run" / "daemon.sock"])
    assert "connected" not in got.values() and hits == []


def test_a_command_can_use_a_socket_it_made_in_its_temp_dir(mac: Mac) -> None:
    script = (
        "import json, os, socket\n"
        "path = os.path.join(os.environ['TMPDIR'], 'own.sock')\n"
        "server = socket.socket(socket.AF_UNIX); server.bind(path); server.listen()\n"
        "client = socket.socket(socket.AF_UNIX); client.connect(path)\n"
        "a, b = socket.socketpair(); a.send(b'x')\n"
        "print(json.dumps(b.recv(1).decode()))\n"
    )
    assert mac.probe(script) == "x"


def test_oracle_nothing_readable_outside_what_is_granted(mac: Mac) -> None:
    plant(mac)
    (mac.home / "notes.txt").write_text("private notes\n")
    granted = [str(mac.ws)]
    skip = [*SYSTEM_TREES, "/dev", "/System/Volumes/Preboot"]
    script = f"""
import json, os
granted, skip = {json.dumps(granted)}, {json.dumps(skip)}
bad, stack = [], ["/"]
while stack:
    d = stack.pop()
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for name in names:
        p = os.path.join(d, name)
        if p in skip or os.path.islink(p) or any(p == g or p.startswith(g + "/") for g in granted):
            continue
        if os.path.isdir(p):
            stack.append(p)
        else:
            try:
                with open(p, "rb") as f:
                    if f.read(1):
                        bad.append(p)
            except OSError:
                pass
print(json.dumps(bad))
"""
    assert mac.probe(script) == []


def test_policy_read_only_dirs_are_shown_read_only_with_secrets_masked(mac: Mac) -> None:
    tools = mac.root / "shared-tools"
    (tools / "bin").mkdir(parents=True)
    (tools / "README").write_text("tools\n")
    (tools / ".netrc").write_text(f"password {MARK}\n")
    spec = dataclasses.replace(mac.spec(), read_only=(str(tools),))
    result = mac.run(f"cat {tools}/README; cat {tools}/.netrc", spec)
    assert "tools" in result["stdout"] and MARK not in result["stdout"]
    assert mac.run(f"touch {tools}/new", spec)["success"] is False
    assert not (tools / "new").exists()


def test_a_toolchain_home_and_gitconfig_are_read_only(mac: Mac) -> None:
    (mac.home / ".gitconfig").write_text("[user]\n\tname = Me\n")
    (mac.home / ".cargo" / "bin").mkdir(parents=True)
    (mac.home / ".cargo" / "credentials.toml").write_text(f"token = '{MARK}'\n")
    result = mac.run(
        "cat ~/.gitconfig; ls ~/.cargo; cat ~/.cargo/credentials.toml; touch ~/.gitconfig"
    )
    assert "name = Me" in result["stdout"] and "bin" in result["stdout"]
    assert MARK not in result["stdout"] + result["stderr"]
    assert (mac.home / ".gitconfig").read_text() == "[user]\n\tname = Me\n"


def test_a_writable_home_shows_none_of_its_dot_entries_but_the_needed_ones(mac: Mac) -> None:
    (mac.home / ".gitconfig").write_text("[user]\n\tname = Me\n")
    (mac.home / ".lesskey").write_text("#env\n")
    spec = mac.spec(allowed_dirs=[str(mac.home)])
    result = mac.run(
        "cd ~ && cat .gitconfig; cat .bashrc; echo x > .lesskey; echo y > .pdbrc; "
        "echo z > ws/new.txt",
        spec,
    )
    assert "name = Me" in result["stdout"] and "# rc" not in result["stdout"]
    assert (mac.home / ".lesskey").read_text() == "#env\n"
    assert not (mac.home / ".pdbrc").exists()
    assert (mac.ws / "new.txt").read_text() == "z\n"


# -- tests/adversarial/test_attack_view.py's attacks ----------------------------------------


def test_attack_git_credential_store_in_a_shown_dir(mac: Mac) -> None:
    store = mac.home / ".config" / "git" / "credentials"
    store.parent.mkdir(parents=True)
    store.write_text(f"https://me:{MARK}@github.com\n")
    result = mac.run(f"cat {store}")
    assert MARK not in result["stdout"] + result["stderr"]


def test_attack_daemon_socket_in_a_path_dirs_install_prefix(mac: Mac) -> None:
    (mac.home / ".rd" / "bin").mkdir(parents=True)
    sock = mac.home / ".rd" / "docker.sock"
    path_var = f"{mac.home}/.rd/bin:{SYSTEM_PATH}"
    spec = mac.spec(path_var=path_var)
    got, hits = connect_all(mac, [sock], spec)
    assert got[str(sock)] != "connected" and hits == []


def test_attack_the_home_on_path_shows_nothing_of_the_home(mac: Mac) -> None:
    (mac.home / "other").mkdir()
    (mac.home / "other" / "notes.txt").write_text(f"private {MARK}\n")
    path_var = f"{SYSTEM_PATH}:{mac.home}"
    result = mac.run(
        f"cat {mac.home}/other/notes.txt", mac.spec(path_var=path_var), path_var=path_var
    )
    assert MARK not in result["stdout"] + result["stderr"]


def test_attack_a_link_planted_at_a_path_prefix_shows_nothing(mac: Mac) -> None:
    proj = mac.root / "proj"
    proj.mkdir()
    (mac.home / "other").mkdir()
    (mac.home / "other" / "notes.txt").write_text(f"private {MARK}\n")
    path_var = f"{proj}/.venv/bin:{SYSTEM_PATH}"
    spec = mac.spec(allowed_dirs=[str(proj)], path_var=path_var)
    planted = mac.run(f"ln -s {mac.home} .venv", spec, path_var=path_var, cwd=proj)
    assert planted["exitCode"] == 0, planted
    spec = mac.spec(allowed_dirs=[str(proj)], path_var=path_var)  # the next command's
    result = mac.run(f"cat {mac.home}/other/notes.txt", spec, path_var=path_var, cwd=proj)
    assert MARK not in result["stdout"] + result["stderr"]


def test_attack_a_secret_named_link_to_a_system_dir_stops_nothing(mac: Mac) -> None:
    assert mac.run("ln -s /usr/bin deploy.pem")["exitCode"] == 0
    assert mac.run("echo still-here")["stdout"] == "still-here\n"


def test_usability_git_works_in_a_worktree_whose_repository_is_elsewhere(mac: Mac) -> None:
    main = mac.home / "main"
    main.mkdir()
    worktree = mac.home / "wt"
    git = "git -c user.name=t -c user.email=t@example.com"
    subprocess.run(
        f"{git} init -q && echo x > a && {git} add a && {git} commit -qm init && "
        f"{git} worktree add -q {worktree}",
        shell=True,
        check=True,
        cwd=main,
    )
    spec = mac.spec(allowed_dirs=[str(worktree)])
    result = mac.run("git log --oneline", spec, cwd=worktree)
    assert result["exitCode"] == 0 and "init" in result["stdout"], result


# -- the network and other processes ----------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def test_no_tcp_or_udp_reaches_the_host(mac: Mac, listener: Listener) -> None:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener.port}), 3)"
    send = f"import socket; socket.socket(2, 2).sendto(b'x', ('127.0.0.1', {listener.udp_port}))"
    assert mac.run(f'{python()} -c "{connect}"')["success"] is False
    assert mac.run(f'{python()} -c "{send}"')["success"] is False
    assert mac.run("curl -s -m 3 https://example.com")["success"] is False
    listener.close()
    assert listener.hits == 0


def test_the_agent_process_is_out_of_reach(mac: Mac) -> None:
    me = os.getpid()
    assert mac.run(f"kill -0 {me}")["success"] is False
    assert mac.run(f"ps -E -p {me} -o command=")["stdout"].strip() == ""


def test_nothing_runs_outside_the_sandbox_on_its_behalf(mac: Mac) -> None:
    """macOS's ways to have another process do it: a launchd job (run by launchd, outside
    any sandbox), an app opened by Launch Services, an Apple event to the Finder, a
    preference written by cfprefsd. Each must fail and leave no trace."""
    label = f"com.metona-agent.test.{os.getpid()}"
    victim = mac.outside / "by-proxy.txt"
    try:
        for command in (
            f"launchctl submit -l {label} -- /usr/bin/touch {victim}",
            "open -g -a TextEdit",
            "osascript -e 'tell application \"Finder\" to get name of home'",
            "defaults write com.metona-agent.test planted -bool true",
        ):
            assert mac.run(command)["success"] is False, command
        listed = subprocess.run(["launchctl", "list", label], capture_output=True, check=False)
        assert listed.returncode != 0, "a launchd job was made from inside the sandbox"
        assert not victim.exists()
        read = subprocess.run(
            ["defaults", "read", "com.metona-agent.test", "planted"], capture_output=True
        )
        assert read.returncode != 0, "a preference was written from inside the sandbox"
    finally:
        subprocess.run(["launchctl", "remove", label], capture_output=True, check=False)
        subprocess.run(["defaults", "delete", "com.metona-agent.test"], capture_output=True)


@pytest.mark.parametrize("name", ["MY_API_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"])
def test_the_environment_holds_no_secrets(mac: Mac, name: str) -> None:
    result = mac.run("env", environ={name: MARK})
    assert result["success"] is True and MARK not in result["stdout"]


def host_pids(marker: str) -> list[int]:
    out = subprocess.run(
        ["ps", "-axo", "pid=,stat=,command="], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        pid, stat, command = line.split(None, 2)
        if command.strip() == f"sleep {marker}" and not stat.startswith("Z"):
            found.append(int(pid))
    return found


def test_a_timeout_kills_the_whole_group(mac: Mac) -> None:
    marker = f"{40 + os.getpid() % 1000 / 1000:.3f}"
    result = mac.run(f"sleep {marker} & sleep {marker} & wait", timeout_ms=500)
    assert result["timedOut"] is True and result["success"] is False
    deadline = time.monotonic() + 5
    while host_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_pids(marker) == []


def test_limits_reach_the_command(mac: Mac) -> None:
    """CPU seconds, data size, processes and no core files, as the Landlock child sets them
    (macOS takes RLIMIT_DATA but does not hold allocations to it: README "Platforms")."""
    script = (
        "import json, resource as r\n"
        "names = ('RLIMIT_CPU', 'RLIMIT_DATA', 'RLIMIT_NPROC', 'RLIMIT_CORE')\n"
        "print(json.dumps([r.getrlimit(getattr(r, n))[1] for n in names]))\n"
    )
    (mac.ws / "limits.py").write_text(script)
    result = mac.run(
        f"{python()} limits.py", command_cpu_seconds=7, command_memory_mb=300, command_processes=99
    )
    assert json.loads(result["stdout"]) == [7, 300 << 20, 99, 0], result


def test_a_cpu_hog_is_stopped(mac: Mac) -> None:
    result = mac.run(f"{python()} -c 'while True: pass'", command_cpu_seconds=1)
    assert result["success"] is False and "timedOut" not in result
    code = result["exitCode"]
    assert code < 0 or code > 128, result  # a signal (SIGXCPU), not the program's own exit


# -- stdio MCP servers -----------------------------------------------------------------------------


def serve(mac: Mac, network: bool, code: str) -> subprocess.CompletedProcess[str]:
    """What a stdio server started with `sandbox: seatbelt` does when it runs `code`."""
    config = McpServerConfig(command=python(), sandbox="seatbelt", network=network)
    env = {"PATH": SYSTEM_PATH, "HOME": str(mac.home)}
    argv, fds, inner = confined(config, [python(), "-c", code], env, str(mac.ws), mac.spec())
    assert argv[0] == "/usr/bin/sandbox-exec" and fds == ()
    return subprocess.run(argv, env=inner, cwd=mac.ws, capture_output=True, text=True, timeout=60)


def test_an_mcp_server_writes_only_in_the_allowed_dirs(mac: Mac) -> None:
    code = (
        "import pathlib, sys\n"
        "pathlib.Path('inside.txt').write_text('ok')\n"
        f"pathlib.Path({str(mac.outside / 'victim.txt')!r}).write_text('x')\n"
    )
    result = serve(mac, False, code)
    assert result.returncode != 0
    assert (mac.ws / "inside.txt").read_text() == "ok"
    assert (mac.outside / "victim.txt").read_text() == "keep me\n"


def test_an_mcp_servers_network_is_what_its_config_says(mac: Mac, listener: Listener) -> None:
    code = f"import socket; socket.create_connection(('127.0.0.1', {listener.port}), 3)"
    assert serve(mac, False, code).returncode != 0
    assert serve(mac, True, code).returncode == 0
    listener.close()
    assert listener.hits == 1
