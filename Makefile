# Two commands: `make demo` and `make test`. Both bootstrap what they need:
# uv from PyPI, the workspace from uv.lock, and (for the browser test) Debian's chromium.
SHELL := /bin/bash
PYTHON ?= python3
UV := $(PYTHON) -m uv
# make demo PORT=9000 (0 picks a free port); STORE=path.db to keep the demo's store elsewhere
PORT ?= 8765
STORE ?=

.PHONY: demo test bootstrap bootstrap-run lint typecheck pytest chromium postgres bench

# what running needs: uv and the packages (no dev tools); bytecode compiled once, so no
# command recompiles every module (PYTHONDONTWRITEBYTECODE environments included)
bootstrap-run:
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet uv \
		|| $(PYTHON) -m pip install --quiet --user --break-system-packages uv
	@$(UV) sync --all-packages --frozen --quiet --no-dev --inexact --compile-bytecode
	@$(UV) run --frozen --no-sync python -m compileall -q core/src plugins >/dev/null

# what testing needs too: the dev group (pytest, ruff, mypy, playwright)
bootstrap: bootstrap-run
	@$(UV) sync --all-packages --frozen --quiet

# Ctrl-C stops the demo cleanly (it exits 130 only when a second Ctrl-C cut the stop short)
demo: bootstrap-run
	@$(UV) run --frozen --no-sync backchannel demo --port $(PORT) $(if $(STORE),--store $(STORE)) \
		|| [ $$? -eq 130 ]

chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# the PostgreSQL store's tests start a throwaway cluster from Debian's server binaries
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing Debian's postgresql for the PostgreSQL store tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

lint: bootstrap
	$(UV) run --frozen ruff check core plugins tests bench examples
	$(UV) run --frozen ruff format --check core plugins tests bench examples

typecheck: bootstrap
	$(UV) run --frozen mypy core plugins

pytest: bootstrap chromium postgres
	BACKCHANNEL_REQUIRE_POSTGRES=1 $(UV) run --frozen pytest -q

test: lint typecheck pytest

# one table of every figure; aiogram (for the side-by-side) is fetched for this run only
bench: bootstrap
	$(UV) run --frozen --with 'aiogram>=3,<4' python bench/all.py
	$(UV) run --frozen python bench/window.py
	$(UV) run --frozen python bench/hook.py
