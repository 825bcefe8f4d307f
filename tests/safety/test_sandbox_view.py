"""What a sandboxed command sees (sandbox/view.py `view`): the system dirs, the allowed dirs,
what commands need from the home dir, and nothing else; memory it cannot hold by any route.

A read-only bind of `/` showed credentials in every other folder and every daemon's socket
(connect(2) works through a read-only mount). The `test_attack_*` tests replay that on real
bubblewrap and Landlock; the class tests generate names and places rather than list them,
and the oracle test walks what a command sees and checks each entry against the grant.

Homes live under /var/tmp, never /tmp: bubblewrap gives commands a private /tmp, so a home
under the host's /tmp would be out of sight for the wrong reason."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from cli.config.settings import LimitsConfig, PolicyConfig
from cli.safety.policy import Policy
from cli.safety.sandbox.launch import KINDS, bwrap_problem, landlock_problem
from cli.safety.sandbox.spec import SandboxSpec
from cli.safety.sandbox.view import HOME_READ_ONLY
from cli.tools import ToolContext
from cli.tools.shell import run_command_in

MARK = "cred-7d1e-do-not-show"
PYTHON = "/usr/bin/python3"  # a system interpreter: shown by every sandbox

# Credential file names (each on cli/safety/sensitive.py's list) and where they were left, relative
# to a fake machine root: none of these places is an allowed dir or a system dir.
CREDENTIALS = (
    ".npmrc",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".aws/credentials",
    ".docker/config.json",
    ".kube/config",
    ".ssh/id_rsa",
    ".env",
    "service-credentials.json",
    "deploy.pem",
    "prod.key",
    "terraform.tfstate",
)
PLACES = (
    "home/other",  # the attack: another folder of the same home
    "home/other/deep/er",
    "home",
    "home/.config/some-tool",
    "home/ws-sibling",
    "srv/app",  # another tree of the machine
    "otheruser",  # another user's home
    "mnt/usb/backup",
)
SOCKETS = (
    "home/.docker/desktop/docker.sock",  # the attack: Docker Desktop for Linux
    "home/.colima/default/docker.sock",
    "home/.lima/default/sock/ssh.sock",
    "home/.emacs.d/server/server",
    "home/other/app.sock",
    "run/user/1000/bus",
    "var/run/docker.sock",
    "otheruser/.gnupg/S.gpg-agent",
)


def require(kind: str) -> None:
    problem = bwrap_problem() if kind == "bwrap" else landlock_problem()
    if problem:
        pytest.skip(f"{kind} sandbox not available here: {problem}")
    if not os.path.exists(PYTHON):
        pytest.skip(f"no {PYTHON} to probe with")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    require(request.param)
    return str(request.param)


@dataclass
class Machine:
    root: Path  # a fake machine's root, under /var/tmp
    home: Path
    ws: Path  # the allowed dir, ~/ws

    def spec(self, kind: str, **policy: Any) -> SandboxSpec:
        policy.setdefault("allowed_dirs", [str(self.ws)])
        resolved = Policy(PolicyConfig(**policy), cwd=str(self.ws), home=str(self.home))
        return SandboxSpec(
            kind, resolved.allowed_dirs, resolved.blocked_dirs, str(self.home), resolved.classes
        )

    def run(
        self, kind: str, command: str, spec: SandboxSpec | None = None, **limits: int
    ) -> dict[str, Any]:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        ctx = ToolContext(cwd=str(self.ws), limits=LimitsConfig(**limits), environ=env)
        return run_command_in(spec or self.spec(kind), ctx, command, timeout_ms=60_000)

    def probe(self, kind: str, script: str, spec: SandboxSpec | None = None) -> Any:
        """Run a Python script in the sandbox; it prints one JSON value."""
        (self.ws / "probe.py").write_text(script)
        result = self.run(kind, f"{PYTHON} probe.py", spec)
        assert result["exitCode"] == 0, result
        return json.loads(result["stdout"])


@pytest.fixture
def machine() -> Iterator[Machine]:
    if not os.access("/var/tmp", os.W_OK):
        pytest.skip("no writable /var/tmp to put a home outside the sandbox's private /tmp")
    root = Path(tempfile.mkdtemp(prefix="metona-view-", dir="/var/tmp")).resolve()
    home = root / "home"
    (home / "ws").mkdir(parents=True)
    (home / "ws" / "main.py").write_text("print('hi')\n")
    try:
        yield Machine(root, home, home / "ws")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def plant_credentials(machine: Machine) -> list[str]:
    paths = []
    for place in PLACES:
        for name in CREDENTIALS:
            path = machine.root / place / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"secret={MARK}\n")
            paths.append(str(path))
    return paths


class Listeners:
    """Real Unix sockets listening at paths; counts every connection that reaches one."""

    def __init__(self, paths: list[Path]) -> None:
        self.hits: list[str] = []
        self.servers = []
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
            server.listen(8)
            server.settimeout(0.2)
            self.servers.append((str(path), server))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            for path, server in self.servers:
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                self.hits.append(path)
                conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for _, server in self.servers:
            server.close()


def connect_all(kind: str, machine: Machine, paths: list[Path]) -> tuple[dict[str, str], list]:
    """Listen at `paths`, have a sandboxed command connect to each: what it got for each
    path, and which connections reached a listener."""
    listeners = Listeners(paths)
    try:
        (machine.ws / "paths.json").write_text(json.dumps([str(p) for p in paths]))
        got = machine.probe(kind, CONNECT_ALL)
    finally:
        listeners.close()
    return got, listeners.hits


CONNECT_ALL = """
import json, socket, sys
out = {}
for path in json.loads(sys.argv[1] if len(sys.argv) > 1 else open('paths.json').read()):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        out[path] = "connected"
    except OSError as exc:
        out[path] = type(exc).__name__
    finally:
        s.close()
print(json.dumps(out))
"""

READ_ALL = """
import json
out = {}
for path in json.load(open('paths.json')):
    try:
        with open(path) as f:
            out[path] = f.read()
    except OSError as exc:
        out[path] = "!" + type(exc).__name__
print(json.dumps(out))
"""


# -- the attacks ----------------------------------------------------------------------------


def test_attack_a_command_reaches_a_daemon_socket_under_the_home(
    kind: str, machine: Machine
) -> None:
    """Docker Desktop for Linux listens at ~/.docker/desktop/docker.sock (root on the host);
    under bubblewrap a command connected to it through the read-only bind of `/`."""
    sock = machine.home / ".docker" / "desktop" / "docker.sock"
    got, hits = connect_all(kind, machine, [sock])
    assert got[str(sock)] != "connected" and hits == []


def test_attack_a_command_reads_credentials_in_another_folder(kind: str, machine: Machine) -> None:
    """With the allowed dir ~/ws, `cat ~/other/.npmrc ~/other/.netrc …` printed them all,
    under bubblewrap and under Landlock: names were masked only directly under ~/."""
    names = (".npmrc", ".netrc", ".git-credentials", ".pgpass", ".aws/credentials")
    for name in names:
        path = machine.home / "other" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"secret={MARK}\n")
    result = machine.run(kind, "cat " + " ".join(f"~/other/{n}" for n in names))
    assert MARK not in result["stdout"] + result["stderr"], result


# -- the classes ------------------------------------------------------------------------------


def test_no_credential_outside_the_allowed_dirs_is_readable(kind: str, machine: Machine) -> None:
    planted = plant_credentials(machine)
    (machine.ws / "paths.json").write_text(json.dumps(planted))
    got = machine.probe(kind, READ_ALL)
    read = [p for p, text in got.items() if MARK in text]
    assert read == [], read
    assert len(got) == len(PLACES) * len(CREDENTIALS)


def test_no_socket_outside_the_allowed_dirs_is_reachable(kind: str, machine: Machine) -> None:
    got, hits = connect_all(kind, machine, [machine.root / rel for rel in SOCKETS])
    assert [p for p, how in got.items() if how == "connected"] == []
    assert hits == []
    assert len(got) == len(SOCKETS)


def test_a_socket_inside_the_allowed_dir_is_masked(kind: str, machine: Machine) -> None:
    """A daemon's socket that happens to lie in the project (a dev server's, an agent's)."""
    sock = machine.ws / "run" / "daemon.sock"
    got, hits = connect_all(kind, machine, [sock])
    assert got[str(sock)] != "connected" and hits == []


def test_a_command_can_use_a_socket_it_made_itself(kind: str, machine: Machine) -> None:
    script = """
import json, os, socket, tempfile
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "own.sock")
server = socket.socket(socket.AF_UNIX); server.bind(path); server.listen()
if os.environ.get("TMPDIR") is None: raise SystemExit("no TMPDIR")
"""
    # Under Landlock connect(2) is refused whatever the socket (sandbox/landlock.py): only
    # binding and listening are checked there.
    script += (
        "client = socket.socket(socket.AF_UNIX)\n"
        "try:\n    client.connect(path); print(json.dumps('connected'))\n"
        "except OSError as e:\n    print(json.dumps(type(e).__name__))\n"
    )
    got = machine.probe(kind, script)
    assert got == ("connected" if kind == "bwrap" else "PermissionError")


def _oracle(kind: str, machine: Machine, spec: SandboxSpec) -> list[str]:
    """Walk everything a command can list outside /proc, /sys, /dev and the system dirs,
    and return each entry that is readable but in no granted place."""
    granted = [str(machine.ws), *(os.path.realpath(p) for p in spec.read_only)]
    script = f"""
import json, os
granted = {json.dumps(granted)}
skip = ("/proc", "/sys", "/dev", "/usr", "/etc", "/opt", "/nix", "/gnu", "/tmp")
bad = []
stack = ["/"]
while stack:
    d = stack.pop()
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for name in names:
        p = os.path.join(d, name)
        if p in skip or os.path.islink(p):
            continue
        if any(p == g or p.startswith(g + "/") for g in granted):
            continue
        if os.path.isdir(p):
            stack.append(p)
        elif os.access(p, os.R_OK) and os.path.getsize(p) > 0:
            try:
                open(p, "rb").read(1)
            except OSError:
                continue
            bad.append(p)
print(json.dumps(bad))
"""
    result: list[str] = machine.probe(kind, script, spec)
    return result


def test_oracle_nothing_readable_outside_what_is_granted(kind: str, machine: Machine) -> None:
    """Every file a command can read outside the system dirs lies in an allowed dir or a
    tree the policy shows: the view is an allow list, not a list of masks."""
    plant_credentials(machine)
    (machine.home / ".bashrc").write_text("# rc\n")
    (machine.home / "notes.txt").write_text("private notes\n")
    spec = machine.spec(kind)
    assert _oracle(kind, machine, spec) == []


def test_policy_commands_read_only_shows_a_tree_read_only_with_secrets_masked(
    kind: str, machine: Machine
) -> None:
    tools = machine.root / "shared-tools"
    (tools / "bin").mkdir(parents=True)
    (tools / "README").write_text("tools\n")
    (tools / ".netrc").write_text(f"password {MARK}\n")
    spec = replace(machine.spec(kind), read_only=(str(tools),))
    result = machine.run(kind, f"cat {tools}/README; cat {tools}/.netrc", spec)
    assert "tools" in result["stdout"] and MARK not in result["stdout"], result
    touched = machine.run(kind, f"touch {tools}/new", spec)
    assert touched["success"] is False and not (tools / "new").exists()
    assert _oracle(kind, machine, spec) == []


def test_a_path_dir_under_the_home_is_shown_with_its_install_prefix(
    kind: str, machine: Machine
) -> None:
    prefix = machine.home / "miniconda3"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "lib" / "libx.txt").write_text("lib\n")
    tool = prefix / "bin" / "hello-tool"
    tool.write_text('#!/bin/sh\ncat "$(dirname "$0")/../lib/libx.txt"\n')
    tool.chmod(0o755)
    spec = machine.spec(kind)
    env_path = f"{prefix}/bin:/usr/bin:/bin"
    ctx = ToolContext(
        cwd=str(machine.ws),
        limits=LimitsConfig(),
        environ={"PATH": env_path, "HOME": str(machine.home)},
    )
    result = run_command_in(spec, ctx, "hello-tool", timeout_ms=60_000)
    assert result["stdout"] == "lib\n", result


def test_a_toolchain_home_and_gitconfig_are_read_only(kind: str, machine: Machine) -> None:
    assert "~/.gitconfig" in HOME_READ_ONLY and "~/.cargo" in HOME_READ_ONLY
    (machine.home / ".gitconfig").write_text("[user]\n\tname = Me\n")
    (machine.home / ".cargo" / "bin").mkdir(parents=True)
    (machine.home / ".cargo" / "credentials.toml").write_text(f"token = '{MARK}'\n")
    result = machine.run(
        kind, "cat ~/.gitconfig; ls ~/.cargo; cat ~/.cargo/credentials.toml; touch ~/.gitconfig"
    )
    assert "name = Me" in result["stdout"] and "bin" in result["stdout"]
    assert MARK not in result["stdout"] + result["stderr"]
    assert (machine.home / ".gitconfig").read_text() == "[user]\n\tname = Me\n"


def test_a_writable_home_shows_none_of_its_dot_entries_but_the_needed_ones(
    machine: Machine,
) -> None:
    """Working in $HOME itself (bwrap): the dot-entries configure programs and hold daemons'
    sockets, so they are hidden, but the toolchains and git's settings, read-only; no new
    dot-entry can be made."""
    require("bwrap")
    (machine.home / ".gitconfig").write_text("[user]\n\tname = Me\n")
    (machine.home / ".bashrc").write_text("# rc\n")
    (machine.home / ".lesskey").write_text("#env\n")
    sock = machine.home / ".docker" / "desktop" / "docker.sock"
    listeners = Listeners([sock])
    spec = machine.spec("bwrap", allowed_dirs=[str(machine.home)])
    try:
        result = machine.run(
            "bwrap",
            f"cd ~ && cat .gitconfig; cat .bashrc; echo x > .lesskey; echo y > .pdbrc; "
            f'echo z > ws/new.txt; {PYTHON} -c "import socket; '
            f"socket.socket(socket.AF_UNIX).connect('{sock}')\"",
            spec,
        )
    finally:
        listeners.close()
    assert "name = Me" in result["stdout"] and "# rc" not in result["stdout"]
    assert (machine.home / ".lesskey").read_text() == "#env\n"
    assert not (machine.home / ".pdbrc").exists()
    assert (machine.ws / "new.txt").read_text() == "z\n"
    assert listeners.hits == []


# -- memory -----------------------------------------------------------------------------------

MEMORY_PROBE = """
import ctypes, json, mmap, os, sys
N = 600 << 20  # more than the 256 MiB the test allows
route = sys.argv[1]
def on_disk(path):
    mounts = [line.split()[1:3] for line in open("/proc/self/mounts")]
    real = os.path.realpath(path)
    mine = max((m for m in mounts if real == m[0] or real.startswith(m[0].rstrip("/") + "/")),
               key=lambda m: len(m[0]))
    return mine[1] not in ("tmpfs", "ramfs")
def touch(m):
    for i in range(0, N, 4096):
        m[i] = 1
try:
    if route == "memfd":
        fd = os.memfd_create("x"); os.ftruncate(fd, N); touch(mmap.mmap(fd, N))
    elif route == "sysv_shm":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.shmget(0, N, 0o1000 | 0o600) < 0:
            raise OSError(ctypes.get_errno(), "shmget")
    elif route == "shared_anonymous":
        touch(mmap.mmap(-1, N))
    elif route == "dev_zero_shared":
        touch(mmap.mmap(os.open("/dev/zero", os.O_RDWR), N, mmap.MAP_SHARED))
    elif route == "tmp" and on_disk(os.environ.get("TMPDIR", "/tmp")):
        print(json.dumps("on disk")); raise SystemExit  # a disk's files are not memory
    elif route in ("dev_shm", "tmp", "root", "run", "var", "home"):
        where = {"dev_shm": "/dev/shm", "tmp": os.environ.get("TMPDIR", "/tmp"),
                 "root": "/", "run": "/run", "var": "/var", "home": os.environ["HOME"]}[route]
        with open(os.path.join(where, "fill"), "wb") as f:
            for _ in range(N >> 20):
                f.write(b"x" * (1 << 20))
    elif route == "private":
        bytearray(N)
    print(json.dumps("held"))
except (OSError, MemoryError, ValueError) as exc:
    print(json.dumps(type(exc).__name__))
"""
ROUTES = (
    "memfd",
    "sysv_shm",
    "shared_anonymous",
    "dev_zero_shared",
    "dev_shm",
    "tmp",
    "root",
    "run",
    "var",
    "home",
    "private",
)


@pytest.mark.parametrize("route", ROUTES)
def test_no_route_holds_more_memory_than_command_memory_mb(
    kind: str, machine: Machine, route: str
) -> None:
    (machine.ws / "mem.py").write_text(MEMORY_PROBE)
    result = machine.run(kind, f"{PYTHON} mem.py {route}", command_memory_mb=256)
    assert result["exitCode"] == 0, result
    assert json.loads(result["stdout"]) != "held", (route, result)


def test_programs_still_work_under_the_memory_filter(kind: str, machine: Machine) -> None:
    """What the filter leaves: private memory, shared mappings of files, pipes, processes
    and their shared values (multiprocessing keeps them in files), sqlite's WAL. Under
    Landlock there is no /dev/shm to write (it would be the host's, a tmpfs), so
    multiprocessing's locks and pools do not work there (README "Safety")."""
    script = """
import json, mmap, multiprocessing as mp, os, sqlite3, sys
def square(x): return x * x
if __name__ == "__main__":
    squares, value = [1, 4, 9], 7
    if sys.argv[-1] == "bwrap":
        with mp.Pool(2) as pool: squares = pool.map(square, [1, 2, 3])
        value = mp.Value("i", 7).value
    child = mp.get_context("fork").Process(target=square, args=(2,)); child.start(); child.join()
    with open("m.bin", "wb") as f: f.write(b"\\0" * 4096)
    with open("m.bin", "r+b") as f:
        m = mmap.mmap(f.fileno(), 4096); m[0] = 1; m.close()
    db = sqlite3.connect("t.db"); db.execute("pragma journal_mode=wal")
    db.execute("create table t(x)"); db.execute("insert into t values (1)"); db.commit()
    print(json.dumps([squares, value, child.exitcode, db.execute("select x from t").fetchone()[0]]))
"""
    (machine.ws / "probe.py").write_text(script)
    result = machine.run(kind, f"{PYTHON} probe.py {kind}")
    assert result["exitCode"] == 0, result
    assert json.loads(result["stdout"]) == [[1, 4, 9], 7, 0, 1]
