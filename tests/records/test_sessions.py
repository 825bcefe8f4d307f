"""Saved conversations on disk."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cli.errors import UsageError
from cli.records.sessions import SessionStore, timestamp_name

MESSAGES = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi ünïcode"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "read_file", "arguments": {"path": "a"}}}],
    },
    {"role": "tool", "tool_name": "read_file", "content": "{}"},
]


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    path = store.save("work", "qwen3:8b", MESSAGES)
    assert path == tmp_path / "sessions" / "work.json"
    session = store.load("work")
    assert session.messages == MESSAGES
    assert session.model == "qwen3:8b" and session.name == "work" and session.saved
    assert json.loads(path.read_text(encoding="utf-8"))["version"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["work.json"]  # no temp files left


def test_latest_is_the_most_recently_saved(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    assert store.latest() is None
    store.save("old", "m", MESSAGES)
    store.save("new", "m", MESSAGES[:2])
    past = time.time() - 100
    os.utime(tmp_path / "old.json", (past, past))
    assert store.names() == ["new", "old"]
    latest = store.latest()
    assert latest is not None and latest.name == "new"


@pytest.mark.parametrize("name", ["../escape", "a/b", "", ".hidden", "x" * 101, "sp ace"])
def test_unsafe_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(UsageError, match="not usable"):
        SessionStore(tmp_path).save(name, "m", MESSAGES)
    assert not any(tmp_path.iterdir())


def test_loading_a_missing_session_names_the_saved_ones(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.save("alpha", "m", MESSAGES)
    with pytest.raises(UsageError, match=r"no saved session 'beta' \(saved: alpha\)"):
        store.load("beta")


@pytest.mark.parametrize(
    "content",
    ["not json", '{"messages": "nope"}', '{"messages": [{"content": "no role"}]}', "[]"],
    ids=["garbage", "not-a-list", "no-role", "not-an-object"],
)
def test_a_broken_session_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(UsageError, match=r"bad\.json"):
        SessionStore(tmp_path).load("bad")


def test_timestamp_names_are_valid_and_sortable() -> None:
    name = timestamp_name()
    SessionStore(Path("/nonexistent")).path(name)  # does not raise
    assert len(name) == len("2026-11-29_12-00-00")
