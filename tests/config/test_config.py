"""The YAML config: where it is found, how it is checked, and the host lookup order."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from cli.backends.ollama import normalize_host
from cli.config.loading import load_config, parse_config
from cli.config.settings import Config, find_config, resolve_host
from cli.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config.example.yaml"


def config_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "t.yaml")
    assert info.value.exit_code == 2
    return info.value


# -- defaults and loading ----------------------------------------------------------------------


def test_no_file_gives_defaults() -> None:
    config = load_config(None)
    assert config == Config()
    # No num_ctx: it is sized per request, and only one the user sets is a floor.
    assert config.ollama.options == {"temperature": 0.7}
    assert config.ollama.max_num_ctx == 32768
    assert config.policy.confirm == "write-only"
    assert config.policy.allowed_dirs == ["."]
    assert config.agent.max_steps == 10


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n"])
def test_empty_file_gives_defaults(text: str) -> None:
    config = parse_config(text, "t.yaml")
    assert config == Config()
    assert config.source == "t.yaml"


def test_null_sections_give_defaults() -> None:
    config = parse_config("ollama:\nagent:\npolicy:\n  commands:\n  limits:\n", "t.yaml")
    assert config == Config()


def test_load_config_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("agent:\n  max_steps: 4\n")
    config = load_config(path)
    assert config.agent.max_steps == 4
    assert config.source == str(path)


def test_load_config_unreadable_is_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"agent:\n  system_prompt: caf\xe9\n")
    for path in (tmp_path, bad):  # a directory, then invalid UTF-8
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert str(path) in info.value.message
        assert info.value.exit_code == 2


# -- find_config -------------------------------------------------------------------------------


def _write_config(directory: Path) -> Path:
    path = directory / "metona-agent" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("agent:\n  max_steps: 3\n")
    return path


def test_find_config_explicit_missing_is_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        find_config(str(missing), {"HOME": str(tmp_path)})
    assert str(missing) in info.value.message
    assert info.value.exit_code == 2


def test_find_config_explicit_wins_over_xdg(tmp_path: Path) -> None:
    _write_config(tmp_path / "xdg")
    explicit = tmp_path / "mine.yaml"
    explicit.write_text("")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert find_config(str(explicit), env) == explicit


def test_find_config_uses_xdg_config_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write_config(home / ".config")  # not this one: XDG_CONFIG_HOME is set
    expected = _write_config(tmp_path / "xdg")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert find_config(None, env) == expected
    assert load_config(find_config(None, env)).agent.max_steps == 3


def test_find_config_xdg_without_file_is_none(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert find_config(None, env) is None


def test_find_config_falls_back_to_home_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    expected = _write_config(home / ".config")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    monkeypatch.delitem(env, "XDG_CONFIG_HOME")
    assert find_config(None, env) == expected
    assert find_config(None, {**env, "XDG_CONFIG_HOME": ""}) == expected
    # The XDG spec: a relative value is invalid and ignored.
    assert find_config(None, {**env, "XDG_CONFIG_HOME": "relative/dir"}) == expected


# -- errors name file, line and key ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        pytest.param("ollamma:\n  model: x\n", 1, "ollamma", id="unknown-top-level"),
        pytest.param("policy:\n  confirm: all\n  confirmm: all\n", 3, "policy.confirmm", id="nest"),
        pytest.param(
            "policy:\n  limits:\n    max_read_byte: 1\n",
            3,
            "policy.limits.max_read_byte",
            id="unknown-deep",
        ),
        pytest.param("agent:\n  max_steps: '10'\n", 2, "agent.max_steps", id="str-for-int"),
        pytest.param("ollama:\n  think: 1\n", 2, "ollama.think", id="int-for-bool"),
        pytest.param("ollama:\n  think: 'yes'\n", 2, "ollama.think", id="str-for-bool"),
        pytest.param("policy:\n  tools: [read_file]\n", 2, "policy.tools", id="list-for-mapping"),
        pytest.param("ollama:\n  options: [1]\n", 2, "ollama.options", id="list-for-options"),
        pytest.param("policy: [a]\n", 1, "policy", id="list-for-section"),
        pytest.param("policy:\n  allowed_dirs: .\n", 2, "policy.allowed_dirs", id="str-for-list"),
        pytest.param("policy:\n  allowed_dirs: [1]\n", 2, "policy.allowed_dirs", id="int-item"),
        pytest.param("ollama:\n  timeout: fast\n", 2, "ollama.timeout", id="str-for-float"),
        pytest.param("ollama:\n  model: 8\n", 2, "ollama.model", id="int-for-str"),
        pytest.param("ollama:\n  keep_alive: true\n", 2, "ollama.keep_alive", id="bool-keep"),
        pytest.param("ollama:\n  keep_alive: 1.5\n", 2, "ollama.keep_alive", id="float-keep"),
        pytest.param("policy:\n  confirm: sometimes\n", 2, "policy.confirm", id="bad-confirm"),
        pytest.param(
            "policy:\n  tools:\n    read_file: maybe\n", 3, "policy.tools.read_file", id="bad-set"
        ),
        pytest.param(
            "policy:\n  tools:\n    reed_file: allow\n", 3, "policy.tools.reed_file", id="bad-tool"
        ),
        pytest.param(
            "policy:\n  unattended: [read_file, reed_file]\n",
            2,
            "policy.unattended",
            id="bad-unattended",
        ),
        pytest.param(
            "policy:\n  sensitive_patterns: ['(']\n",
            2,
            "policy.sensitive_patterns",
            id="bad-regex",
        ),
        pytest.param(
            "policy:\n  commands:\n    deny: ['[a']\n",
            3,
            "policy.commands.deny",
            id="bad-deny-regex",
        ),
        pytest.param("agent:\n  max_steps: 0\n", 2, "agent.max_steps", id="max-steps-0"),
        pytest.param("agent:\n  max_steps: -1\n", 2, "agent.max_steps", id="max-steps-neg"),
        pytest.param("ollama:\n  timeout: 0\n", 2, "ollama.timeout", id="timeout-0"),
    ],
)
def test_errors_name_file_line_and_key(text: str, line: int, key: str) -> None:
    error = config_error(text)
    assert error.message.startswith(f"config t.yaml, line {line}: "), error.message
    assert f" {key}: " in error.message


def test_unknown_key_lists_the_known_keys() -> None:
    error = config_error("policy:\n  confirmm: all\n")
    assert "unknown key" in error.message
    assert "confirm" in error.message.split("known keys here:")[1]


def test_wrong_type_says_what_was_expected() -> None:
    assert "whole number" in config_error("agent:\n  max_steps: '10'\n").message
    assert "true or false" in config_error("ollama:\n  think: 1\n").message
    assert "mapping" in config_error("policy:\n  tools: [read_file]\n").message


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("ollama:\n  model: x\n bad: y\n", 3, id="indent"),
        pytest.param("ollama:\n\tmodel: x\n", 2, id="tab"),
        pytest.param("agent:\n  max_steps: 3\npolicy:\n  allowed_dirs: [a, b\n", 5, id="flow"),
    ],
)
def test_invalid_yaml_names_the_line(text: str, line: int) -> None:
    error = config_error(text)
    assert error.message.startswith(f"config t.yaml, line {line}: invalid YAML"), error.message


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        pytest.param("policy:\n  confirm: all\npolicy:\n  confirm: none\n", 3, "policy", id="top"),
        pytest.param(
            "policy:\n  tools:\n    read_file: allow\n    read_file: deny\n",
            4,
            "policy.tools.read_file",
            id="nested",
        ),
    ],
)
def test_duplicate_key_is_an_error(text: str, line: int, key: str) -> None:
    error = config_error(text)
    assert error.message.startswith(f"config t.yaml, line {line}: "), error.message
    assert f"'{key}' appears twice" in error.message


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("ollama: &a\n  options: *a\n", id="mapping-contains-itself"),
        pytest.param("policy: &p\n  tools: *p\n", id="section-contains-itself"),
    ],
)
def test_recursive_alias_is_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_config(text, "t.yaml")


# -- values ------------------------------------------------------------------------------------


def test_options_merge_with_defaults() -> None:
    config = parse_config("ollama:\n  options:\n    temperature: 0.2\n", "t.yaml")
    assert config.ollama.options == {"temperature": 0.2}
    more = parse_config("ollama:\n  options:\n    num_ctx: 8192\n    top_k: 5\n", "t.yaml")
    assert more.ollama.options == {"num_ctx": 8192, "temperature": 0.7, "top_k": 5}
    # the default is not shared between configs
    assert Config().ollama.options == {"temperature": 0.7}


@pytest.mark.parametrize(("value", "expected"), [("'10m'", "10m"), ("300", 300), ("-1", -1)])
def test_keep_alive_accepts_duration_or_seconds(value: str, expected: Any) -> None:
    config = parse_config(f"ollama:\n  keep_alive: {value}\n", "t.yaml")
    assert config.ollama.keep_alive == expected


def test_timeout_whole_number_becomes_float() -> None:
    config = parse_config("ollama:\n  timeout: 60\n", "t.yaml")
    assert config.ollama.timeout == 60.0
    assert isinstance(config.ollama.timeout, float)


def test_lists_replace_defaults() -> None:
    config = parse_config("policy:\n  blocked_dirs: [/srv]\n  allowed_dirs:\n", "t.yaml")
    assert config.policy.blocked_dirs == ["/srv"]
    assert config.policy.allowed_dirs == []


def test_setting_values_are_read() -> None:
    text = (
        "policy:\n  confirm: none\n  tools:\n    run_command: ask\n    delete_file: allow\n"
        "  unattended: [write_file]\n  commands:\n    allow: ['git status']\n"
    )
    policy = parse_config(text, "t.yaml").policy
    assert policy.confirm == "none"
    assert policy.tools == {"run_command": "ask", "delete_file": "allow"}
    assert policy.unattended == ["write_file"]
    assert policy.commands.allow == ["git status"]
    assert policy.commands.deny == Config().policy.commands.deny


# -- config.example.yaml -----------------------------------------------------------------------


def test_example_parses_to_the_defaults() -> None:
    config = load_config(EXAMPLE)
    assert config == Config()
    assert config.source == str(EXAMPLE)
    # Every value, including the nested ones, and with the same types (300 is read as 300.0).
    loaded = dataclasses.asdict(dataclasses.replace(config, source=None, lines={}))
    assert loaded == dataclasses.asdict(Config())
    assert type(config.ollama.timeout) is float


def _keys(cls: type[Any]) -> list[str]:
    names = []
    for f in dataclasses.fields(cls):
        if f.name in ("source", "lines"):  # where it came from, not keys of the file
            continue
        names.append(f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            names += _keys(type(default))
    return names


def test_example_documents_every_key() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    keys = _keys(Config)
    assert {"ollama", "keep_alive", "commands", "deny", "limits", "max_tool_result_chars"} <= set(
        keys
    )
    missing = [k for k in keys if not re.search(rf"^\s*{re.escape(k)}:", text, re.MULTILINE)]
    assert missing == []


# -- host lookup -------------------------------------------------------------------------------


def _config_with_host(host: str) -> Config:
    return parse_config(f"ollama:\n  host: '{host}'\n", "t.yaml")


def test_resolve_host_order() -> None:
    config = _config_with_host("c.example:3")
    env = {"OLLAMA_HOST": "b.example:2"}
    assert resolve_host("a.example:1", env, config) == "http://a.example:1"
    assert resolve_host(None, env, config) == "http://b.example:2"
    assert resolve_host(None, {}, config) == "http://c.example:3"
    assert resolve_host(None, {}, Config()) == "http://localhost:11434"
    assert resolve_host(None, {}, _config_with_host("")) == "http://localhost:11434"


def test_resolve_host_skips_blank_values() -> None:
    config = _config_with_host("c.example:3")
    assert resolve_host("  ", {"OLLAMA_HOST": ""}, config) == "http://c.example:3"


@pytest.mark.parametrize(
    ("flag", "env", "host", "source"),
    [
        pytest.param("h:99999", {}, "c:1", "--host", id="flag"),
        pytest.param(None, {"OLLAMA_HOST": "host:99999"}, "c:1", "OLLAMA_HOST", id="env"),
        pytest.param(None, {}, "c:0", "ollama.host", id="config"),
        pytest.param(None, {}, "ftp://c", "ollama.host", id="scheme"),
    ],
)
def test_resolve_host_error_names_the_source(
    flag: str | None, env: dict[str, str], host: str, source: str
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_host(flag, env, _config_with_host(host))
    assert info.value.message.startswith(f"{source}: ")
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1.2.3.4", "http://1.2.3.4:11434"),
        ("example.com:1234", "http://example.com:1234"),
        ("http://1.2.3.4", "http://1.2.3.4:80"),
        ("https://1.2.3.4", "https://1.2.3.4:443"),
        ("https://example.com/ollama", "https://example.com:443/ollama"),
        ("https://example.com/ollama/", "https://example.com:443/ollama"),
        ("http://example.com:8080/", "http://example.com:8080"),
        (":1234", "http://127.0.0.1:1234"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:5000", "http://127.0.0.1:5000"),
        ("  'localhost:5000'  ", "http://localhost:5000"),
        ('"localhost:5000"', "http://localhost:5000"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("[::1]", "http://[::1]:11434"),
        ("::1", "http://[::1]:11434"),
        ("localhost", "http://localhost:11434"),
    ],
)
def test_normalize_host(raw: str, expected: str) -> None:
    assert normalize_host(raw) == expected


@pytest.mark.parametrize(
    "raw", ["host:99999", "host:0", "host:http", "[::1]:70000", "ftp://host", "h:-1"]
)
def test_normalize_host_rejects_bad_hosts(raw: str) -> None:
    with pytest.raises(ValueError):
        normalize_host(raw)


# -- the server's protocol: ollama.api -----------------------------------------------------------


def test_api_keys_default_to_the_native_protocol() -> None:
    ollama = Config().ollama
    assert (ollama.api, ollama.api_key_env, ollama.stream) == ("native", "OPENAI_API_KEY", True)
    config = parse_config(
        "ollama:\n  api: openai\n  api_key_env: LMSTUDIO_KEY\n  stream: false\n", "t.yaml"
    )
    assert (config.ollama.api, config.ollama.api_key_env, config.ollama.stream) == (
        "openai",
        "LMSTUDIO_KEY",
        False,
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("ollama:\n  api: lmstudio\n", "expected one of native, openai"),
        ("ollama:\n  stream: 'no'\n", "true or false"),
        ("ollama:\n  api_key_env: 3\n", "expected a string"),
    ],
    ids=["api", "stream", "key-env"],
)
def test_api_keys_are_checked(text: str, words: str) -> None:
    assert words in config_error(text).message


@pytest.mark.parametrize(
    ("flag", "env", "host", "source"),
    [
        pytest.param("http://localhost:1234/v1", {}, "c:1", "--host", id="flag"),
        pytest.param(None, {"OLLAMA_HOST": "localhost:1234/v1/"}, "c:1", "OLLAMA_HOST", id="env"),
        pytest.param(None, {}, "http://lms:1234/v1", "ollama.host", id="config"),
    ],
)
def test_a_v1_url_with_the_native_api_suggests_api_openai(
    flag: str | None, env: dict[str, str], host: str, source: str
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_host(flag, env, _config_with_host(host))
    assert info.value.message.startswith(f"{source}: ")
    assert "add --api openai" in info.value.message and info.value.exit_code == 2


def test_with_api_openai_the_host_is_the_base_url_and_ollama_host_is_not_read() -> None:
    config = _config_with_host("http://lms.example:1234/v1")
    env = {"OLLAMA_HOST": "ollama.example:11434"}
    assert resolve_host(None, env, config, "openai") == "http://lms.example:1234/v1"
    assert resolve_host("localhost:8000/v1", env, config, "openai") == "http://localhost:8000/v1"
    openai = parse_config("ollama:\n  api: openai\n  host: 'h:1/v1'\n", "t.yaml")
    assert resolve_host(None, env, openai) == "http://h:1/v1"  # the api from the config


def test_a_file_that_is_one_long_string_is_not_echoed_whole() -> None:
    """`-c /etc/passwd`: the error names what was found, shortened, not the whole file."""
    text = "root:x:0:0:root:/root:/bin/bash " * 50
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "t.yaml")
    message = caught.value.message
    assert "expected a mapping of keys, got a string ('root:x:0:0" in message
    assert len(message) < 200 and "…" in message
