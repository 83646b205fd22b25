# Two commands (see README):
#   make demo   install everything, then run the main job
#   make test   install everything, then run lint, type checks, the layers, the docs build
#               and the whole test suite
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup speedups demo test lint docs docs-build stress clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

# the compiled twins of the hot modules (nakflow/_speedups.py); rebuilt after an edit.
# Then the bytecode of the project's own packages: with PYTHONDONTWRITEBYTECODE set (as
# on CI machines) every `nakflow` process would compile them again (0.65 s to start
# instead of 0.27), and the suite starts hundreds
speedups: setup
	$(BIN)/python scripts/build_speedups.py || echo "[speedups] continuing with pure Python"
	$(BIN)/python -m compileall -q nakflow simulations spark_adapter transports > /dev/null

demo: speedups
	$(BIN)/nakflow eval

lint: speedups
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# the documentation site (mkdocs, docs/ and mkdocs.yml); strictly: a warning fails it
docs-build: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# the tests in two runs: those that share the machine on three pytest-xdist workers, then
# those marked quiet one after another with the machine to themselves (tests/conftest.py
# says why); both run whatever the first gives, and either failing fails the target
test: lint docs-build
	@rc=0; \
	$(BIN)/pytest -n 3 --dist loadscope -m "not quiet" || rc=$$?; \
	$(BIN)/pytest -m quiet || rc=$$?; \
	exit $$rc

# Repeat one test to look for flakes: make stress TEST=tests/test_live.py N=20 [BURN=1]
N ?= 20
BURN ?= 0
stress: setup
	@test -n "$(TEST)" || { echo "usage: make stress TEST=<pytest node id> [N=20] [BURN=1]"; exit 2; }
	$(BIN)/python scripts/stress.py -n $(N) $(if $(filter 1,$(BURN)),--burn) $(TEST)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build
	$(if $(wildcard $(BIN)/python),$(BIN)/python scripts/build_speedups.py --clean,find nakflow -name '*_c.*.so' -delete)
