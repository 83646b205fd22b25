# Two commands (see README):
#   make demo   install everything, then run the main job
#   make test   install everything, then run lint, type checks and the whole test suite
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

demo: setup
	$(BIN)/nakflow eval

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
