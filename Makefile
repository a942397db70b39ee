# envfarm developer entry points. `make setup` is idempotent and fast when nothing changed.
SHELL := /bin/bash
VENV := .venv
PYTEST_ARGS ?=
VLLM ?= $(ENVFARM_VLLM)
# the tests of the edit loop: no docker daemon, no images or rootfs, nothing slow
FAST_MARKERS := not docker and not bwrap and not slow and not gpu

.DEFAULT_GOAL := help
.PHONY: help setup test test-fast demo lint docs

help:
	@echo "make setup      system packages, dockerd, .venv, images; each step timed (VLLM=1: also the ~3.4 GB"
	@echo "                vLLM engine venv .venv-vllm for --engine vllm; its tests skip without it)"
	@echo "                .venv-harbor: Harbor's task loader (Python >= 3.12) for the Harbor export tests"
	@echo "make test       setup, then the whole test suite (PYTEST_ARGS='-k foo' to select; VLLM=1 as above)"
	@echo "make test-fast  .venv only, then the tests that need no docker, rootfs or images and are not slow"
	@echo "make demo       setup, then envfarm demo: farm, containment, harness verdicts, CodeRepair, training"
	@echo "make lint       ruff check, then mypy (scripts/typecheck.py)"
	@echo "make docs       .venv, then mkdocs serve (the docs site on http://127.0.0.1:8000)"

setup:
	ENVFARM_VLLM=$(VLLM) scripts/setup.sh

test: setup
	scripts/test.sh $(PYTEST_ARGS)

test-fast:
	scripts/setup.sh --venv-only
	scripts/test.sh -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/envfarm demo

lint:
	scripts/setup.sh --venv-only
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python scripts/typecheck.py

docs:
	scripts/setup.sh --venv-only
	$(VENV)/bin/mkdocs serve
