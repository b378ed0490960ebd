# Two commands: `make demo` and `make test`. Both bootstrap what they need.
SHELL := /bin/bash
UV ?= $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
PY_SOURCES := core/src plugins/telegram/src plugins/slack/src plugins/discord/src plugins/tinyplace/src plugins/webchat/src

.PHONY: demo test bootstrap lint typecheck pytest chromium bench

bootstrap:
	@command -v uv >/dev/null 2>&1 || test -x $(HOME)/.local/bin/uv || python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv
	@$(UV) sync --all-packages --frozen --quiet

demo: bootstrap
	@$(UV) run --frozen backchannel demo

chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

lint: bootstrap
	$(UV) run --frozen ruff check core plugins tests bench
	$(UV) run --frozen ruff format --check core plugins tests bench

typecheck: bootstrap
	$(UV) run --frozen mypy $(PY_SOURCES)

pytest: bootstrap chromium
	$(UV) run --frozen pytest -q

test: lint typecheck pytest

bench: bootstrap
	$(UV) run --frozen python bench/ingest.py
	$(UV) run --frozen python bench/window.py
