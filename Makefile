# Targets: install, run, test, test-portable, test-load, lint, format, bench, e2e, clean. See README.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: install run test test-portable test-load lint format bench e2e clean

install: $(STAMP)  ## .venv with the package (editable); says where `agent` is
	@echo "agent is $(CURDIR)/$(BIN)/agent (for your projects: pipx install $(CURDIR), or uv tool install $(CURDIR))"

# Reinstall when the project's metadata changes; the package itself is editable.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,fast]'
	@touch $(STAMP)

run: install  ## start an interactive session (make run ARGS="-m llama3.1")
	$(BIN)/agent chat $(ARGS)

# The suite in parallel (pytest-xdist), two workers per core: many tests wait on a process, a
# pty or a server more than they compute (one per core left a 2-core machine half idle: 6:15
# against 5:04). worksteal evens out the long sweeps. `make test WORKERS=0`: one process.
WORKERS ?= $(shell $(PYTHON) -c 'import os; print(2 * (os.cpu_count() or 1))')

test: install lint  ## lint, then the whole test suite
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal $(ARGS)

# The file-tool, change-store, undo and adversarial path suites again, with the platform layer
# forced to its portable fallbacks (no openat2, no O_PATH, no renameat2, no /proc: what macOS
# and other systems get where they lack their own calls). By file name, wherever under tests/
# the file is; a name that matches no file fails the target.
PORTABLE_TESTS := test_platform test_tools test_edit_move test_store_edges test_write_ahead \
	test_undo_session test_undo_stack test_undo_verify test_paths \
	test_path_classes test_data_safety test_whole_tree test_search_engines test_crash_sweep

test-portable: install  ## the suites above under METONA_PLATFORM=portable
	@files=""; for name in $(PORTABLE_TESTS); do \
		found=$$(find tests -name "$$name.py" -print -quit); \
		[ -n "$$found" ] || { echo "test-portable: no tests/**/$$name.py" >&2; exit 2; }; \
		files="$$files $$found"; \
	done; \
	echo "METONA_PLATFORM=portable pytest$$files"; \
	METONA_PLATFORM=portable $(BIN)/python -m pytest -n $(WORKERS) --dist worksteal $$files $(ARGS)

# The pty and subprocess-heavy suites again with a CPU hog beside them: as many busy processes
# as cores, as on a loaded CI machine. A test that waits on time rather than on a state of the
# terminal (tests/pty/driver.py) fails here first. The hog is ended whatever the result.
LOAD_TESTS := tests/pty tests/ui tests/cli/test_stream_json.py tests/cli/test_run.py \
	tests/cli/test_app_root.py tests/cli/test_completion_values.py tests/cli/test_run_signals.py \
	tests/safety/test_sandbox.py \
	tests/safety/test_whole_tree.py tests/journal/test_undo_session.py \
	tests/journal/test_old_store.py tests/records/test_sessions_manage.py tests/fs/test_stored.py \
	tests/loop/test_instructions_wired.py
LOAD_WORKERS ?= 2

test-load: install  ## the suites above beside one busy process per core
	@cores=$$($(PYTHON) -c 'import os; print(os.cpu_count() or 1)'); hogs=""; \
	trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq "$$cores"); do $(PYTHON) -c 'while True: pass' & hogs="$$hogs $$!"; done; \
	echo "test-load: $$cores busy processes beside pytest"; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(LOAD_WORKERS) $(LOAD_TESTS) $(ARGS)

lint: install  ## ruff (lint + format check), mypy on cli/, the import rules (pyproject.toml)
	$(BIN)/ruff check cli tests bench
	$(BIN)/ruff format --check cli tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff check --fix cli tests bench
	$(BIN)/ruff format cli tests bench

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	@touch $(BENCH_STAMP)

bench: install $(BENCH_STAMP)  ## speed and memory ratios against in-run baselines (ARGS=--quick)
	$(BIN)/python -m bench $(ARGS)

# Not part of `test`: builds llama-cpp-python once into ~/.cache/metona-agent-e2e (minutes).
e2e: install  ## a real model (SmolLM2-135M) behind llama-cpp-python's OpenAI-compatible server
	$(PYTHON) tests/e2e/setup_env.py
	$(BIN)/python tests/e2e/run.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache build *.egg-info
