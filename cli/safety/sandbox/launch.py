"""Where run_command's commands run: which OS sandbox this machine offers, and the launch that
puts one command inside it (pure but for lazy, cached probes; no UI).

A deny list of command strings is no boundary (docs/safety.md); this is. Two sandboxes, as
Codex CLI and Claude Code do it on Linux:

bwrap     bubblewrap: a command sees only what it needs (`view`): the system dirs read-only,
          the allowed dirs writable (execution surfaces in them read-only, secrets and
          sockets in them masked), an empty home but for what commands read from it
          (toolchains, dirs on PATH, `policy.commands.read_only`), private and size-capped
          /tmp and /dev/shm, empty /run and /var, /proc, no network (a fresh namespace has
          only loopback), its own PID namespace, dies with us.
landlock  for machines where bwrap cannot create namespaces (Ubuntu's AppArmor rule for
          unprivileged user namespaces, WSL1): Landlock lets writes happen only beneath the
          allowed dirs (and a private TMPDIR) and reads only beneath the same view as bwrap's
          but for what is hidden;
          seccomp refuses sockets other than AF_UNIX, connect(2), io_uring, metadata changes
          (chmod, chown, xattrs) and new sessions or process groups. sandbox/landlock.py says
          why each is there. `.git` stays writable: Landlock cannot take back, beneath an
          allowed dir, what it granted there.
seatbelt  macOS's sandbox (`sandbox-exec`), the only one there: the same view as a profile
          (sandbox/seatbelt.py) that denies by default, reads the system and the view,
          writes only the allowed dirs and a private temp dir, keeps surfaces read-only and
          secrets, sockets and the network out of reach.

`auto` is bwrap, else Landlock, on Linux and seatbelt on macOS. If none works, commands are
refused unless the YAML says `policy.commands.sandbox: off`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from cli.config.settings import LimitsConfig
from cli.fs import trees
from cli.fs.paths import is_within
from cli.safety.sandbox import seatbelt
from cli.safety.sandbox.bwrap import bwrap_argv
from cli.safety.sandbox.landlock_rules import landlock_rules
from cli.safety.sandbox.seatbelt_grants import seatbelt_argv, seatbelt_grants
from cli.safety.sandbox.spec import SandboxSpec, SandboxUnavailable, _platform

# The child side of every sandboxed launch, started by path with `python -I -S`: it imports
# nothing of `cli`, so it is found beside this module rather than imported.
CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "landlock.py")


KINDS = ("bwrap", "landlock")  # in the order "auto" tries them on Linux


MACOS_KINDS = ("seatbelt",)  # and on macOS


INSTALL_HINT = "install bubblewrap (`sudo apt-get install bubblewrap`)"


@dataclass(frozen=True)
class Launch:
    """One command, ready to start: `argv` runs under sandbox/landlock.py, which reads `plan`."""

    kind: str  # bwrap | landlock | seatbelt | off
    argv: list[str]
    env: dict[str, str]
    cwd: str
    plan: str  # JSON for cli/safety/sandbox/landlock.py
    scratch: str | None = None  # a private temp dir (Landlock, Seatbelt) to remove afterwards


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def _bwrap_problem(path: str) -> str | None:
    """Why bwrap at `path` cannot sandbox (None: it can). Probed once by running /bin/true
    the way every command runs (through sandbox/landlock.py, under its seccomp filter): Ubuntu
    24.04 ships a bwrap whose namespaces AppArmor refuses, and only trying shows that."""
    # No home and no writable dir: the probe must not depend on what lies in the user's
    # files (a link planted there must not make every later run fall back to Landlock).
    bare = SandboxSpec("bwrap", home="/nonexistent-metona-agent-probe")
    argv = [*bwrap_argv(path, bare, "/", {}, 1024 * 1024), "/bin/true"]
    plan = {"env": {}, "parent": os.getpid(), "rlimits": {}, "landlock": None}
    plan["seccomp"] = "memory"
    try:
        proc = spawn(Launch("bwrap", argv, {}, "/", json.dumps(plan)))
        _, err = proc.communicate(timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} does not run: {exc}"
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        return lines[0] if lines else f"{path} exited with status {proc.returncode}"
    return None


def bwrap_problem() -> str | None:
    path = bwrap_path()
    return _bwrap_problem(path) if path else "bwrap is not installed"


@functools.cache
def landlock_problem() -> str | None:
    """Why the Landlock sandbox cannot run here (None: it can)."""
    from cli.safety.sandbox import landlock  # here: ctypes only when a command runs

    if not landlock.seccomp_supported():
        return f"no seccomp filter for this machine ({os.uname().machine})"
    abi = landlock.abi_version()
    if abi < landlock.MIN_ABI:
        found = f"ABI {abi}" if abi else "none"
        return f"the kernel's Landlock is too old or off ({found}; Linux 6.2+ is needed)"
    return None


@functools.cache
def seatbelt_problem() -> str | None:
    """Why the Seatbelt sandbox cannot run here (None: it can). Probed once by running
    /usr/bin/true under the profile of a bare spec, the way every command runs: a
    sandbox-exec that is missing, or refuses (inside another sandbox, where a second
    cannot be applied), or a profile this macOS does not take, shows only by trying."""
    if _platform() != "darwin":
        return f"Seatbelt is macOS's sandbox; this is {_platform()}"
    if not os.access(seatbelt.SANDBOX_EXEC, os.X_OK):
        return f"{seatbelt.SANDBOX_EXEC} is missing"
    scratch = scratch_dir("metona-agent-probe-")
    bare = SandboxSpec("seatbelt", home="/nonexistent-metona-agent-probe")
    grants = seatbelt_grants(bare, "", scratch)
    argv = seatbelt.profile(grants).argv(["/usr/bin/true"])
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=10, check=False, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{seatbelt.SANDBOX_EXEC} does not run: {exc}"
    finally:
        cleanup(Launch("seatbelt", [], {}, "/", "{}", scratch))
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        return lines[0] if lines else f"sandbox-exec exited with status {proc.returncode}"
    return None


def choose(mode: str, available: Collection[str] | None = None, platform: str | None = None) -> str:
    """The sandbox a command runs in: "bwrap", "landlock", "seatbelt" or "off";
    SandboxUnavailable if `mode` cannot be had. `available` replaces the machine's probes
    and `platform` sys.platform (tests)."""
    if mode == "off":
        return "off"
    platform = platform or _platform()
    if mode == "seatbelt" and platform != "darwin":
        raise SandboxUnavailable(
            f"policy.commands.sandbox is seatbelt, which is macOS's sandbox and not there on "
            f"{platform}: set policy.commands.sandbox: auto (bubblewrap or Landlock)"
        )
    if mode in KINDS and platform == "darwin":
        raise SandboxUnavailable(
            f"policy.commands.sandbox is {mode}, which is Linux's; on macOS set "
            "policy.commands.sandbox: seatbelt or auto"
        )
    probes: Mapping[str, Callable[[], str | None]] = {
        "bwrap": bwrap_problem,
        "landlock": landlock_problem,
        "seatbelt": seatbelt_problem,
    }
    auto = MACOS_KINDS if platform == "darwin" else KINDS
    wanted = auto if mode == "auto" else (mode,)
    problems: dict[str, str] = {}
    for kind in wanted:
        if available is None:
            problem = probes[kind]()
        else:
            problem = None if kind in available else "not available"
        if problem is None:
            return kind
        problems[kind] = problem
    raise SandboxUnavailable(_refusal(mode, problems, platform))


def _refusal(mode: str, problems: Mapping[str, str], platform: str = sys.platform) -> str:
    if mode == "bwrap":
        return (
            f"policy.commands.sandbox is bwrap, but bubblewrap cannot run here "
            f"({problems['bwrap']}): {INSTALL_HINT} or set policy.commands.sandbox: auto"
        )
    if mode == "landlock":
        return (
            f"policy.commands.sandbox is landlock, but {problems['landlock']}: "
            "set policy.commands.sandbox: auto"
        )
    if "seatbelt" in problems:
        return (
            f"run_command needs a sandbox and macOS's cannot run here (sandbox-exec: "
            f"{problems['seatbelt']}): set policy.commands.sandbox: off to run commands "
            "unconfined"
        )
    if platform != "linux":
        return (
            f"run_command's sandbox needs Linux (bubblewrap or Landlock) or macOS (Seatbelt); "
            f"on {platform} set policy.commands.sandbox: off to run commands unconfined"
        )
    return (
        f"run_command needs a sandbox and this machine has none (bubblewrap: "
        f"{problems['bwrap']}; Landlock: {problems['landlock']}): {INSTALL_HINT} or set "
        "policy.commands.sandbox: off to run commands unconfined"
    )


def _rlimits(limits: LimitsConfig) -> dict[str, int]:
    return {
        "cpu": limits.command_cpu_seconds,
        "data": limits.command_memory_mb * 1024 * 1024,
        "nproc": limits.command_processes,
    }


def prepare(
    spec: SandboxSpec,
    command: str,
    cwd: str,
    env: Mapping[str, str],
    limits: LimitsConfig,
    available: Collection[str] | None = None,
    platform: str | None = None,
) -> Launch:
    """The launch of `/bin/sh -c command` in the sandbox `spec.mode` calls for (`available`
    and `platform`: as for `choose`)."""
    kind = choose(spec.mode, available, platform)
    shell = ["/bin/sh", "-c", command]
    plan: dict[str, object] = {
        "env": dict(env),
        "parent": os.getpid(),
        "rlimits": _rlimits(limits),
        "landlock": None,
    }
    if kind == "off":
        return Launch(kind, shell, dict(env), cwd, json.dumps(plan))
    if kind == "bwrap":
        # Caches go to the private /tmp: the home directory is read-only in there, and
        # `go build` refuses to run without a writable cache.
        inner = {**env, "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache"}
        tmp_bytes = limits.command_memory_mb * 1024 * 1024
        argv = bwrap_argv(bwrap_path() or "bwrap", spec, cwd, inner, tmp_bytes) + shell
        plan["seccomp"] = "memory"
        return Launch(kind, argv, dict(env), cwd, json.dumps(plan))
    scratch = scratch_dir()
    if kind == "seatbelt":
        return _seatbelt_launch(spec, shell, cwd, env, plan, scratch)
    env = {**env, "TMPDIR": scratch, "XDG_CACHE_HOME": os.path.join(scratch, ".cache")}
    plan["env"] = env
    plan["landlock"] = {"rules": landlock_rules(spec, scratch, env.get("PATH", ""))}
    return Launch(kind, shell, env, cwd, json.dumps(plan), scratch)


def _seatbelt_launch(
    spec: SandboxSpec,
    shell: list[str],
    cwd: str,
    env: Mapping[str, str],
    plan: dict[str, object],
    scratch: str,
) -> Launch:
    """sandbox/landlock.py applies the limits (it needs no Linux for that), then execs
    sandbox-exec, which applies the profile and execs the shell. Caches go to the private
    temp dir: the home is read-only, and Go's (~/Library/Caches on macOS, whatever
    XDG_CACHE_HOME says) must be writable for `go build` to run."""
    tmp = os.path.realpath(scratch)
    cache = os.path.join(tmp, ".cache")
    env = {**env, "TMPDIR": tmp, "XDG_CACHE_HOME": cache, "GOCACHE": os.path.join(cache, "go")}
    plan["env"] = env
    try:
        argv = seatbelt_argv(spec, shell, env.get("PATH", ""), tmp)
    except SandboxUnavailable:
        cleanup(Launch("seatbelt", [], {}, cwd, "{}", scratch))
        raise
    return Launch("seatbelt", argv, env, cwd, json.dumps(plan), scratch)


def scratch_dir(prefix: str = "metona-agent-cmd-") -> str:
    """A private temp dir for a Landlock-confined command, which has no tmpfs of its own:
    on disk, since a file in a tmpfs is memory that no limit of the command counts. /var/tmp
    is on disk by convention, /tmp often a tmpfs; where /var/tmp is one too, the user's
    cache dir."""
    for base in ("/var/tmp", os.path.join(os.path.expanduser("~"), ".cache")):
        if os.access(base, os.W_OK | os.X_OK) and not _on_tmpfs(base):
            return tempfile.mkdtemp(prefix=prefix, dir=base)
    return tempfile.mkdtemp(prefix=prefix)


def _on_tmpfs(path: str) -> bool:
    """Is `path` on a tmpfs (or ramfs)? From the mount table, where there is one."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as file:
            mounts = [line.split()[1:3] for line in file if len(line.split()) > 2]
    except OSError:
        return False  # no /proc (not Linux): nothing to tell by
    real = os.path.realpath(path)
    holding = [(m, kind) for m, kind in mounts if is_within(real, m.replace("\\040", " "))]
    return bool(holding) and max(holding, key=lambda m: len(m[0]))[1] in ("tmpfs", "ramfs")


def spawn(launch: Launch) -> subprocess.Popen[bytes]:
    """Start the launch in its own session (so a timeout can kill the whole group), with no
    stdin and piped output. The plan goes through a file descriptor, not argv: an argv
    string is capped at 128 KiB, and a large home dir makes many Landlock rules."""
    script = CHILD_SCRIPT
    fd = plan_fd(launch.plan.encode())
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", script, str(fd), "--", *launch.argv],
            cwd=launch.cwd,
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)


def plan_fd(data: bytes) -> int:
    """A descriptor to read `data` from: a memfd on Linux, an unlinked temp file elsewhere."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("metona-agent-plan", os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile() as file:
            fd = os.dup(file.fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def setup_failure(returncode: int, stderr: str) -> str | None:
    """What went wrong, if the command never ran because sandbox/landlock.py could not confine
    it; None if the command itself ran (whatever its status)."""
    from cli.safety.sandbox import landlock

    if returncode != landlock.SETUP_FAILED or not stderr.startswith(landlock.ERROR_PREFIX):
        return None
    return stderr.splitlines()[0][len(landlock.ERROR_PREFIX) :]


def cleanup(launch: Launch) -> None:
    """Remove the Landlock scratch dir: iteratively (a command may leave a tree of any
    depth there, and shutil.rmtree recurses), never following a link, never entering a
    mount point."""
    if not launch.scratch:
        return
    parent, name = os.path.split(launch.scratch)
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        trees.remove(fd, name, skip_mounts=True)
    except (OSError, trees.Refused):
        pass  # a temp dir left behind is no loss
    finally:
        os.close(fd)


__all__ = [
    "KINDS",
    "MACOS_KINDS",
    "Launch",
    "choose",
    "cleanup",
    "prepare",
    "seatbelt_problem",
    "setup_failure",
    "spawn",
]
