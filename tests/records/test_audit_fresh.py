"""`agent audit verify` before the first tool call: nothing to check is not a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli.records.audit import default_path, verify
from tests.conftest import RunCli


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def test_verify_on_a_fresh_install_says_no_records_yet(run_cli: RunCli) -> None:
    path = default_path(os.environ)
    assert not path.exists()
    r = run_cli("audit", "verify")
    assert (r.code, r.stderr) == (0, "")
    assert r.stdout == (
        f"no records yet (no audit log at {path}: it is written on the first tool call)\n"
    )
    assert not path.exists()  # verifying writes nothing


def test_verify_of_an_empty_log_says_no_records_yet(run_cli: RunCli, tmp_path: Path) -> None:
    empty = tmp_path / "audit.jsonl"
    empty.write_bytes(b"")
    r = run_cli("audit", "verify", "--file", str(empty))
    assert (r.code, r.stdout, r.stderr) == (0, f"no records yet ({empty} is empty)\n", "")


def test_a_missing_log_holds_no_records(tmp_path: Path) -> None:
    check = verify(tmp_path / "none.jsonl")
    assert check.intact and check.records == 0 and not check.exists


def test_an_unreadable_log_is_still_an_error(run_cli: RunCli, tmp_path: Path) -> None:
    r = run_cli("audit", "verify", "--file", str(tmp_path))  # a directory
    assert r.code == 1 and "cannot read the audit log" in r.stderr and "Traceback" not in r.stderr
