# envfarm developer entry points. `make setup` is idempotent and fast when nothing changed.
SHELL := /bin/bash
VENV := .venv
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup test demo lint

help:
	@echo "make setup   install docker.io/bubblewrap/debootstrap if missing, start dockerd, .venv, build images"
	@echo "make test    setup, then the test suite (PYTEST_ARGS='-k foo' to select)"
	@echo "make demo    setup, then envfarm demo"
	@echo "make lint    ruff check, then mypy (scripts/typecheck.py)"

setup:
	scripts/setup.sh

test: setup
	scripts/test.sh $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/envfarm demo

lint:
	scripts/setup.sh --venv-only
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python scripts/typecheck.py
