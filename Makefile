# labwarden -- `make demo` and `make test` each set up what is missing first.
# Re-running is fast: every step is skipped when its result is already there.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
INFERNO := .tools/bin/inferno-collapse-perf
CARGO := $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
PYTEST_ARGS ?=

.PHONY: setup system python tools qlab test test-long demo bench lint clean

setup: system python tools qlab

system:
	@sh scripts/setup-system.sh

python: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

tools: $(INFERNO)
$(INFERNO):
	@echo "setup: installing inferno into .tools (cargo install inferno --locked, ~1-2 min)"
	$(CARGO) install inferno --locked --root .tools --quiet

# The qlab's guest image: built from Debian packages once (~40 s, root: mmdebstrap), then cached in
# ~/.cache/labwarden/qlab ($$LABWARDEN_QLAB_CACHE) keyed by the package versions; ~0 s when cached.
qlab: system python
	@if [ "$$(id -u)" = 0 ]; then $(BIN)/labwarden qlab image >/dev/null && echo "setup: qlab image ready"; \
	else echo "setup: the qlab image is built as root (make setup as root once)" >&2; fi

test: setup
	$(BIN)/ruff check labwarden tests bench
	$(BIN)/mypy
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/pytest $(PYTEST_ARGS)

# the tests marked `long` (tests/conftest.py): the qlab loop, ~10 minutes of real boots
test-long: setup
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/pytest --long -m long $(PYTEST_ARGS)

demo: setup
	PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/labwarden demo

BENCHES := vlab_curve device_rtt tool_overhead symbolize measurement loop_overhead token_economy \
	decision loop_throughput soak qlab

bench: setup
	@for b in $(BENCHES); do echo "== bench/$$b.py"; \
	  PATH="$(CURDIR)/.tools/bin:$$PATH" $(BIN)/python bench/$$b.py || exit 1; done

lint: python
	$(BIN)/ruff check labwarden tests bench
	$(BIN)/mypy

clean:
	rm -rf .vlab .qlab .pytest_cache build dist
