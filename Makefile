# Two commands: `make demo` and `make test`. Both bootstrap what they need:
# uv from PyPI, the workspace from uv.lock, and (for the browser test) Debian's chromium.
SHELL := /bin/bash
PYTHON ?= python3
UV := $(PYTHON) -m uv

.PHONY: demo test bootstrap lint typecheck pytest chromium postgres bench

bootstrap:
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet uv \
		|| $(PYTHON) -m pip install --quiet --user --break-system-packages uv
	@$(UV) sync --all-packages --frozen --quiet

demo: bootstrap
	@$(UV) run --frozen backchannel demo

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
