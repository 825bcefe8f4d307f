"""run_command inside the OS sandbox (sandbox/launch.py, sandbox/landlock.py): real bubblewrap, real
Landlock and seccomp, real files and sockets; each mode is skipped only when this machine
truly lacks it.

The scratch tree lives in /var/tmp when it can: bubblewrap gives commands a private /tmp, so
a victim under the host's /tmp would be out of sight rather than protected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.config.settings import LimitsConfig, PolicyConfig
from cli.errors import ToolError
from cli.fs.paths import resolve_path
from cli.safety.policy import Policy
from cli.safety.sandbox.bwrap import _bwrap_help, bwrap_argv
from cli.safety.sandbox.landlock import abi_version as landlock_abi
from cli.safety.sandbox.landlock_rules import read_rules
from cli.safety.sandbox.launch import (
    KINDS,
    Launch,
    bwrap_problem,
    choose,
    cleanup,
    landlock_problem,
    spawn,
)
from cli.safety.sandbox.spec import SandboxSpec, SandboxUnavailable
from cli.safety.sandbox.view import hidden_paths, shown_trees
from cli.tools import ToolContext, execute
from cli.tools.shell import run_command_in

Result = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-d0-n0t-l3ak"


def sandbox_problem(kind: str) -> str | None:
    return bwrap_problem() if kind == "bwrap" else landlock_problem()


def require(kind: str) -> str:
    """`kind`, or skip the test with the reason this machine cannot run it."""
    if kind != "off":
        problem = sandbox_problem(kind)
        if problem:
            pytest.skip(f"{kind} sandbox not available here: {problem}")
    return kind


@pytest.fixture(params=KINDS)
def mode(request: pytest.FixtureRequest) -> str:
    return require(request.param)


@pytest.fixture(params=[*KINDS, "off"])
def any_mode(request: pytest.FixtureRequest) -> str:
    return require(request.param)


# -- a scratch tree ----------------------------------------------------------------------------


@dataclass
class Scratch:
    ws: Path  # the allowed dir: the only writable one
    outside: Path  # a tree next to it, not allowed
    home: Path  # $HOME for the command, with secrets and start-up files


def visible_temp_dir(fallback: Path) -> Path:
    if os.access("/var/tmp", os.W_OK):
        return Path(tempfile.mkdtemp(prefix="metona-sbx-", dir="/var/tmp")).resolve()
    return fallback


@contextlib.contextmanager
def scratch_tree(tmp_path: Path) -> Iterator[Scratch]:
    root = visible_temp_dir(tmp_path / "scratch")
    root.mkdir(exist_ok=True)
    s = Scratch(root / "ws", root / "outside", root / "home")
    (s.ws / ".git" / "hooks").mkdir(parents=True)
    (s.ws / ".git" / "config").write_text("[core]\n")
    (s.ws / "main.py").write_text("print('hi')\n")
    (s.outside / "sub").mkdir(parents=True)
    (s.outside / "victim.txt").write_text("keep me\n")
    (s.outside / "sub" / "deep.txt").write_text("deep\n")
    (s.home / ".ssh").mkdir(parents=True)
    (s.home / ".ssh" / "id_rsa").write_text(SECRET)
    (s.home / ".netrc").write_text(f"machine x login me password {SECRET}\n")
    (s.home / ".bashrc").write_text("# rc\n")
    try:
        yield s
    finally:
        if root != tmp_path / "scratch":
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Scratch]:
    with scratch_tree(tmp_path) as s:
        yield s


def spec_for(mode: str, s: Scratch, **policy: Any) -> SandboxSpec:
    """The spec the wiring builds: from the real Policy's resolved dirs."""
    resolved = Policy(PolicyConfig(**policy), cwd=str(s.ws), home=str(s.home))
    return SandboxSpec(mode, resolved.allowed_dirs, resolved.blocked_dirs, str(s.home))


def run(
    mode: str,
    s: Scratch,
    command: str,
    *,
    limits: LimitsConfig | None = None,
    environ: dict[str, str] | None = None,
    timeout_ms: int | None = None,
    available: tuple[str, ...] | None = None,
) -> Result:
    env = {"PATH": os.environ["PATH"], "HOME": str(s.home), "LANG": "C.UTF-8", **(environ or {})}
    ctx = ToolContext(cwd=str(s.ws), limits=limits or LimitsConfig(), environ=env)
    return run_command_in(
        spec_for(mode, s), ctx, command, timeout_ms=timeout_ms, available=available
    )


def snapshot(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under `root`: kind, mode and content (or link target)."""
    out: dict[str, tuple[str, int, str]] = {}
    if not root.exists():
        return {str(root): ("missing", 0, "")}
    for path in sorted([root, *root.rglob("*")]):
        info = path.lstat()
        if path.is_symlink():
            out[str(path)] = ("link", info.st_mode, os.readlink(path))
        elif path.is_dir():
            out[str(path)] = ("dir", info.st_mode, "")
        else:
            out[str(path)] = ("file", info.st_mode, path.read_bytes().hex())
    return out


def visible_python(s: Scratch) -> str:
    """An interpreter the sandbox can see: in a system dir or on PATH (shown read-only), and
    not in a blocked dir (the venv's may live in a blocked /root)."""
    spec = spec_for("bwrap", s)
    shown = shown_trees(spec, os.environ["PATH"])
    candidates = [sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]
    for candidate in filter(os.path.exists, candidates):
        real = os.path.realpath(candidate)
        if any(real.startswith(t + "/") for t in shown) and not any(
            real.startswith(b + "/") for b in spec.blocked
        ):
            return real
    pytest.skip("no Python interpreter the sandbox shows")


@pytest.fixture
def python(scratch: Scratch) -> str:
    return visible_python(scratch)


# -- a listener on the host ----------------------------------------------------------------


class Listener:
    """TCP and UDP sockets on the host's 127.0.0.1 that count whatever reaches them."""

    def __init__(self) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp_port = self.udp.getsockname()[1]
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.tcp, selectors.EVENT_READ)
            selector.register(self.udp, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(0.05):
                    if key.fileobj is self.tcp:
                        conn, _ = self.tcp.accept()
                        conn.close()
                    else:
                        self.udp.recv(65536)
                    self.hits += 1

    def close(self) -> None:
        if self._stop.is_set():
            return
        time.sleep(0.1)  # let a late packet arrive before we stop counting
        self._stop.set()
        self._thread.join()
        self.tcp.close()
        self.udp.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


# -- the file system -----------------------------------------------------------------------


def test_writing_inside_an_allowed_dir_works(mode: str, scratch: Scratch) -> None:
    result = run(mode, scratch, "echo made > new.txt && mkdir -p a/b && mv new.txt a/b/ && ls a/b")
    assert result["success"] is True, result
    assert result["sandbox"] == mode
    assert (scratch.ws / "a" / "b" / "new.txt").read_text() == "made\n"


def test_writing_outside_the_allowed_dirs_fails_and_changes_nothing(
    mode: str, scratch: Scratch, tmp_path: Path
) -> None:
    host_tmp = tmp_path / "host-tmp.txt"  # in the host's /tmp
    host_tmp.write_text("keep me\n")
    before = snapshot(scratch.outside), snapshot(scratch.home), snapshot(tmp_path)
    refused = [
        f"echo x > {scratch.outside}/victim.txt",
        f"echo x > {scratch.outside}/planted.txt",
        f"rm -r {scratch.outside}/sub",  # no -f: a tree the command cannot see fails too
        f"echo x >> {scratch.home}/.bashrc",
        f"echo x > {scratch.home}/.profile",
    ]
    for command in refused:
        result = run(mode, scratch, command)
        assert result["success"] is False, (command, result)
    # bwrap's /tmp is a private tmpfs: these may "work" in there; the host's stays as it was.
    for command in (f"echo x > {host_tmp}", f"rm -f {host_tmp}"):
        run(mode, scratch, command)
    assert (snapshot(scratch.outside), snapshot(scratch.home), snapshot(tmp_path)) == before


def test_git_dir_is_read_only_under_bwrap(scratch: Scratch) -> None:
    require("bwrap")
    for command in ("echo x >> .git/config", "touch .git/hooks/pre-commit", "rm -rf .git"):
        result = run("bwrap", scratch, command)
        assert result["success"] is False, (command, result)
    assert (scratch.ws / ".git" / "config").read_text() == "[core]\n"
    assert list((scratch.ws / ".git" / "hooks").iterdir()) == []
    assert run("bwrap", scratch, "cat .git/config")["stdout"] == "[core]\n"


def test_secrets_are_hidden(mode: str, scratch: Scratch) -> None:
    for target in (scratch.home / ".ssh" / "id_rsa", scratch.home / ".netrc"):
        result = run(mode, scratch, f"cat {target}")
        assert result["success"] is False, result
        assert SECRET not in result["stdout"] + result["stderr"]
    grep = run(mode, scratch, f"grep -r {SECRET} {scratch.home} 2>/dev/null")
    assert SECRET not in grep["stdout"]


def test_secrets_dir_is_empty_under_bwrap(scratch: Scratch) -> None:
    require("bwrap")
    assert run("bwrap", scratch, f"ls -A {scratch.home}/.ssh")["stdout"] == ""


def test_system_dirs_stay_readable_but_not_writable(mode: str, scratch: Scratch) -> None:
    # /etc is a blocked dir by default, yet programs need it (users, ld.so.cache, certs).
    result = run(mode, scratch, "head -1 /etc/passwd && ls /usr/bin >/dev/null && echo ok")
    assert result["success"] is True, result
    assert result["stdout"].endswith("ok\n")
    assert run(mode, scratch, "touch /etc/metona-probe")["success"] is False
    assert not os.path.exists("/etc/metona-probe")


# -- the network and other processes ---------------------------------------------------------


def test_no_tcp_or_udp_reaches_the_host(
    mode: str, scratch: Scratch, listener: Listener, python: str
) -> None:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener.port}), 3)"
    send = f"import socket; socket.socket(2, 2).sendto(b'x', ('127.0.0.1', {listener.udp_port}))"
    tcp = run(mode, scratch, f'{python} -c "{connect}"')
    udp = run(mode, scratch, f'{python} -c "{send}"')
    assert tcp["success"] is False, tcp
    assert listener.hits == 0
    # In bwrap's own network namespace the datagram leaves on a loopback nobody listens on;
    # under Landlock the socket itself is refused.
    if mode == "landlock":
        assert udp["success"] is False and "Operation not permitted" in udp["stderr"], udp
    time.sleep(0.2)
    assert listener.hits == 0


def test_a_unix_socket_on_the_host_is_unreachable(
    mode: str, scratch: Scratch, tmp_path: Path, python: str
) -> None:
    if mode == "bwrap" and not str(tmp_path).startswith("/tmp/"):
        pytest.skip("the host temp dir is not /tmp, which is what bwrap makes private")
    path = tmp_path / "daemon.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    server.setblocking(False)
    try:
        code = f"import socket; socket.socket(socket.AF_UNIX).connect('{path}')"
        result = run(mode, scratch, f'{python} -c "{code}"')
        assert result["success"] is False, result
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_the_agent_process_is_out_of_reach(mode: str, scratch: Scratch) -> None:
    me = os.getpid()
    environ = run(mode, scratch, f"cat /proc/{me}/environ")
    assert environ["success"] is False and environ["stdout"] == ""
    if mode == "landlock" and landlock_abi() < 6:
        pytest.skip("Landlock scopes signals from ABI 6 (Linux 6.12)")
    assert run(mode, scratch, f"kill -0 {me}")["success"] is False


@pytest.mark.parametrize(
    "name",
    [
        "MY_API_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "OLLAMA_API_KEY",
        "GITHUB_TOKEN",
        "OPENAI_API_KEY",
        "AWS_PROFILE",
        "LC_AUTH_TOKEN",
        "DATABASE_PASSWORD",
    ],
)
def test_the_environment_holds_no_secrets(any_mode: str, scratch: Scratch, name: str) -> None:
    result = run(any_mode, scratch, "env", environ={name: SECRET})
    assert result["success"] is True, result
    names = {line.split("=", 1)[0] for line in result["stdout"].splitlines() if "=" in line}
    assert name not in names
    assert SECRET not in result["stdout"]
    assert {"PATH", "HOME", "LANG", "PWD"} <= names


# -- limits ---------------------------------------------------------------------------------


def host_pids(argv: list[str]) -> list[int]:
    wanted = ("\0".join(argv) + "\0").encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == wanted:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except (OSError, IndexError):
            pass  # exited while we looked
    return found


def test_timeout_kills_the_whole_group(mode: str, scratch: Scratch) -> None:
    # A new session would leave the group: bwrap's PID namespace takes it down anyway, and
    # under Landlock setsid(2) is refused.
    first, second = (f"{40 + os.getpid() % 1000 / 1000 + n:.3f}" for n in (0, 1))
    started = time.monotonic()
    result = run(mode, scratch, f"sleep {first} & setsid sleep {second} & wait", timeout_ms=500)
    assert time.monotonic() - started < 5
    assert result["timedOut"] is True and result["success"] is False
    deadline = time.monotonic() + 3
    while (host_pids(["sleep", first]) or host_pids(["sleep", second])) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert host_pids(["sleep", first]) == host_pids(["sleep", second]) == []


DIES_WITH_PARENT_SCRIPT = """
import sys
from cli.safety.sandbox.spec import SandboxSpec
from cli.tools import ToolContext
from cli.tools.shell import run_command_in
ws, home, command = sys.argv[1:4]
ctx = ToolContext(cwd=ws, environ={"PATH": "/usr/bin:/bin", "HOME": home})
run_command_in(SandboxSpec("bwrap", (ws,), (), home), ctx, command, timeout_ms=60_000)
"""


def test_bwrap_commands_die_with_the_agent(scratch: Scratch) -> None:
    require("bwrap")
    marker = f"{50 + os.getpid() % 1000 / 1000:.3f}"
    command = f"sleep {marker} & sleep {marker}; wait"
    script = [sys.executable, "-c", DIES_WITH_PARENT_SCRIPT]
    agent = subprocess.Popen([*script, str(scratch.ws), str(scratch.home), command])
    try:
        deadline = time.monotonic() + 15
        while len(host_pids(["sleep", marker])) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(host_pids(["sleep", marker])) == 2, "the command never started"
    finally:
        agent.kill()
        agent.wait()
    deadline = time.monotonic() + 5
    while host_pids(["sleep", marker]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_pids(["sleep", marker]) == []


def test_a_memory_hog_is_stopped(any_mode: str, scratch: Scratch, python: str) -> None:
    limits = LimitsConfig(command_memory_mb=256)
    result = run(any_mode, scratch, f"{python} -c 'b = bytearray(10 * 2**30)'", limits=limits)
    assert result["success"] is False
    assert "MemoryError" in result["stderr"], result
    assert bytearray(16 * 2**20)  # and we are fine


def test_a_cpu_hog_is_stopped(mode: str, scratch: Scratch, python: str) -> None:
    limits = LimitsConfig(command_cpu_seconds=1)
    result = run(mode, scratch, f"{python} -c 'while True: pass'", limits=limits)
    assert result["success"] is False
    assert "timedOut" not in result, result
    assert result["duration"] < 10_000


def test_limits_reach_the_command(any_mode: str, scratch: Scratch) -> None:
    limits = LimitsConfig(command_cpu_seconds=7, command_memory_mb=300, command_processes=99)
    text = run(any_mode, scratch, "cat /proc/self/limits", limits=limits)["stdout"]
    rows = {line[:26].strip(): line[26:].split() for line in text.splitlines()[1:]}
    assert rows["Max cpu time"][:2] == ["7", "7"]
    assert rows["Max data size"][:2] == [str(300 * 2**20)] * 2
    assert rows["Max processes"][:2] == ["99", "99"]
    assert rows["Max core file size"][:2] == ["0", "0"]


# -- choosing the sandbox -------------------------------------------------------------------


def test_off_runs_unsandboxed(scratch: Scratch) -> None:
    result = run("off", scratch, f"echo changed > {scratch.outside}/victim.txt")
    assert result["success"] is True and result["sandbox"] == "off"
    assert (scratch.outside / "victim.txt").read_text() == "changed\n"


def test_auto_without_any_sandbox_refuses_in_one_line(scratch: Scratch) -> None:
    with pytest.raises(ToolError) as caught:
        run("auto", scratch, "touch ran.txt", available=())
    message = str(caught.value)
    assert "\n" not in message
    assert "apt-get install bubblewrap" in message
    assert "policy.commands.sandbox: off" in message
    assert not (scratch.ws / "ran.txt").exists()


def test_auto_prefers_bwrap_then_landlock() -> None:
    assert choose("auto", ("bwrap", "landlock")) == "bwrap"
    assert choose("auto", ("landlock",)) == "landlock"
    assert choose("off", ()) == "off"


@pytest.mark.parametrize("kind", KINDS)
def test_an_explicit_sandbox_that_is_missing_refuses(kind: str) -> None:
    other = next(k for k in KINDS if k != kind)
    with pytest.raises(SandboxUnavailable, match=f"policy.commands.sandbox is {kind}"):
        choose(kind, (other,))


def test_auto_falls_back_to_landlock_when_bwrap_is_missing(scratch: Scratch) -> None:
    require("landlock")
    result = run("auto", scratch, "echo ok > ok.txt", available=("landlock",))
    assert result["sandbox"] == "landlock" and result["success"] is True, result


def test_a_sandbox_that_cannot_be_set_up_runs_nothing(scratch: Scratch) -> None:
    plan = '{"env": {}, "rlimits": {}, "landlock": {"rules": [["/", "bogus"]]}}'
    marker = scratch.ws / "ran.txt"
    launch = Launch("landlock", ["/bin/sh", "-c", f"touch {marker}"], {}, str(scratch.ws), plan)
    if landlock_problem():
        pytest.skip(f"landlock not available here: {landlock_problem()}")
    proc = spawn(launch)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 125
    assert err.decode().startswith("metona-agent sandbox: unknown rule kind")
    assert not marker.exists()


def test_the_tool_is_sandboxed_without_a_spec_in_the_context(scratch: Scratch) -> None:
    """Until the wiring sets one, run_command falls back to auto with only the working dir
    writable: never to "off"."""
    if bwrap_problem() and landlock_problem():
        pytest.skip("no sandbox on this machine")
    ctx = ToolContext(cwd=str(scratch.ws), environ={"PATH": os.environ["PATH"]})
    paths = {"cwd": resolve_path(".", str(scratch.ws), str(scratch.home))}
    command = f"touch here.txt; echo x > {scratch.outside}/victim.txt"
    result = execute("run_command", ctx, {"command": command}, paths)
    assert result["sandbox"] in KINDS
    assert (scratch.ws / "here.txt").exists()
    assert (scratch.outside / "victim.txt").read_text() == "keep me\n"


def test_the_tool_takes_the_spec_from_the_context(scratch: Scratch) -> None:
    ctx = ToolContext(cwd=str(scratch.ws), environ={"PATH": os.environ["PATH"]})
    # The field the wiring will fill (ToolContext.sandbox); set the way a frozen field is.
    object.__setattr__(ctx, "sandbox", spec_for("off", scratch))
    paths = {"cwd": resolve_path(".", str(scratch.ws), str(scratch.home))}
    result = execute("run_command", ctx, {"command": "echo hi"}, paths)
    assert result["sandbox"] == "off" and result["stdout"] == "hi\n"


# -- how the sandboxes are built -------------------------------------------------------------


def test_bwrap_argv_layers_the_mounts(scratch: Scratch) -> None:
    spec = spec_for("bwrap", scratch, allowed_dirs=[str(scratch.ws)])
    argv = bwrap_argv("bwrap", spec, str(scratch.ws), {"PATH": "/usr/bin"}, 1024)
    text = " ".join(argv)
    ws, git = str(scratch.ws), str(scratch.ws / ".git")
    # No `--ro-bind / /`: bwrap's own empty root, then what a command may see.
    assert argv[:5] == ["bwrap", "--dev", "/dev", "--proc", "/proc"]
    assert "--ro-bind / /" not in text and "--ro-bind /usr /usr" in text
    assert f"--bind {ws} {ws}" in text
    assert text.index(f"--bind {ws} {ws}") < text.index(f"--ro-bind {git} {git}")
    # The home is an empty dir: its secrets are not there to hide, and nor is /root.
    assert f"--dir {scratch.home}" in text
    assert f"{scratch.home}/.ssh" not in text and f"{scratch.home}/.netrc" not in text
    assert "/root" not in text and "--tmpfs /etc" not in text
    # Capped where bwrap can cap them (--size, bwrap 0.6); CI's bwrap can.
    sized = "--size 512 " if shutil.which("bwrap") and "--size" in _bwrap_help("bwrap") else ""
    assert f"{sized}--tmpfs /tmp" in text and f"{sized}--tmpfs /dev/shm" in text
    assert text.index("--dev-bind /dev/full /dev/zero") > text.index("--tmpfs /dev/shm")
    assert text.index("--remount-ro / ") > text.index(f"--bind {ws} {ws}")
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[-6:] == ["--setenv", "PATH", "/usr/bin", "--chdir", ws, "--"]


def test_hidden_paths_keep_what_programs_need(scratch: Scratch) -> None:
    """Secrets are hidden where a command could see them: ~/.cargo is shown read-only (a
    toolchain home), so its credentials are masked there. The home itself is never shown
    whole (nor is a dir holding it or an allowed dir)."""
    (scratch.home / ".cargo" / "bin").mkdir(parents=True)
    (scratch.home / ".cargo" / "credentials.toml").write_text(SECRET)
    hidden = hidden_paths(spec_for("bwrap", scratch))
    for needed in ("/etc", "/sys", "/proc", "/dev", "/usr"):
        assert needed not in hidden
    assert hidden == [str(scratch.home / ".cargo" / "credentials.toml")]
    whole = dataclasses.replace(spec_for("bwrap", scratch), read_only=(str(scratch.home),))
    assert str(scratch.home) not in shown_trees(whole, "")


def test_read_rules_cut_hidden_paths_out_of_the_tree(tmp_path: Path) -> None:
    tree = tmp_path.resolve()
    for name in ("a/keep", "a/secret/x", "a/other", "b"):
        (tree / name).mkdir(parents=True)
    (tree / "a" / "link").symlink_to(tree / "a" / "secret")
    rules = dict(read_rules([str(tree / "a" / "secret")]))
    assert rules[str(tree / "a" / "keep")] == "read"
    assert rules[str(tree / "a" / "other")] == "read"
    assert rules[str(tree / "b")] == "read"
    assert rules[str(tree / "a")] == rules["/"] == "list"
    assert str(tree / "a" / "secret") not in rules
    assert str(tree / "a" / "link") not in rules  # a symlink to it grants nothing
    assert not any(p.startswith(str(tree / "a" / "secret")) for p in rules)


def test_nothing_is_probed_at_import() -> None:
    code = (
        "import sys, cli.tools, cli.safety.sandbox.launch as s\n"
        "print(s._bwrap_problem.cache_info().currsize, s.landlock_problem.cache_info().currsize,"
        " 'cli.safety.sandbox.landlock' in sys.modules, 'ctypes' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0", "False", "False"]


# -- as a normal user ----------------------------------------------------------------------


UNPRIVILEGED_SCRIPT = """
import json, sys
from cli.safety.sandbox.spec import SandboxSpec
from cli.tools import ToolContext
from cli.tools.shell import run_command_in
mode, ws, outside, home, port = sys.argv[1:6]
ctx = ToolContext(cwd=ws, environ={"PATH": "/usr/bin:/bin", "HOME": home})
spec = SandboxSpec(mode, (ws,), (), home)
connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
print(json.dumps([
    run_command_in(spec, ctx, "id -u > me.txt && cat me.txt"),
    run_command_in(spec, ctx, f"echo x > {outside}/victim.txt"),
    run_command_in(spec, ctx, f"cat {home}/.ssh/id_rsa"),
    run_command_in(spec, ctx, f'{sys.executable} -c "{connect}"'),
]))
"""


def test_works_as_an_unprivileged_user(mode: str, scratch: Scratch, listener: Listener) -> None:
    """The tests run as root in CI; developers do not. Re-run the essentials as `nobody`."""
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the other tests cover this")
    nobody = pwd.getpwnam("nobody")
    python = next((p for p in ("/usr/bin/python3", sys.executable) if _usable_by(nobody, p)), "")
    if not python:
        pytest.skip("needs setpriv and a Python (with PyYAML) that `nobody` can run")
    # Theirs, so that only the sandbox stands between them and the victim.
    for path in (scratch.ws.parent, *scratch.ws.parent.rglob("*")):
        os.chown(path, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
    argv = [*_as(nobody), python, "-c", UNPRIVILEGED_SCRIPT, mode, str(scratch.ws)]
    argv += [str(scratch.outside), str(scratch.home), str(listener.port)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    inside, outside, secret, connect = json.loads(proc.stdout)
    assert inside["success"] is True and inside["sandbox"] == mode, inside
    assert inside["stdout"].strip() == str(nobody.pw_uid)
    assert outside["success"] is False
    assert (scratch.outside / "victim.txt").read_text() == "keep me\n"
    assert secret["success"] is False and SECRET not in secret["stdout"]
    assert connect["success"] is False
    assert listener.hits == 0


def _as(user: pwd.struct_passwd) -> list[str]:
    setpriv = shutil.which("setpriv") or "setpriv"
    return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]


def _usable_by(user: pwd.struct_passwd, python: str) -> bool:
    if not shutil.which("setpriv") or not os.path.exists(python):
        return False
    probe = [*_as(user), python, "-c", "import yaml, cli.safety.sandbox.launch"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run(probe, capture_output=True, env=env, timeout=30).returncode == 0


def test_the_scratch_dir_of_a_command_goes_whatever_it_holds(tmp_path: Path) -> None:
    """A command under Landlock can leave a tree of any depth in its scratch dir, and a
    link out of it: cleanup removes the tree without recursion and follows no link."""
    scratch = tmp_path / "scratch"
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file").write_text("stay")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        os.mkdir("scratch", dir_fd=fd)
        here = os.open("scratch", os.O_RDONLY, dir_fd=fd)
        for _ in range(2000):
            os.mkdir("d", dir_fd=here)
            nxt = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = nxt
        os.symlink(str(keep), "out", dir_fd=here)
        os.close(here)
    finally:
        os.close(fd)
    cleanup(Launch("landlock", [], {}, str(tmp_path), "{}", str(scratch)))
    assert not scratch.exists()
    assert (keep / "file").read_text() == "stay"
