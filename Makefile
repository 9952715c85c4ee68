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

# inferno is built once into ~/.cache/labwarden/tools ($$LABWARDEN_TOOLS_CACHE), then copied into
# .tools: a fresh clone on this machine does not compile it again.
TOOLS_CACHE := $(or $(LABWARDEN_TOOLS_CACHE),$(HOME)/.cache/labwarden/tools)
tools: $(INFERNO)
$(INFERNO):
	@if [ ! -x "$(TOOLS_CACHE)/bin/inferno-collapse-perf" ]; then \
	  echo "setup: installing inferno into $(TOOLS_CACHE) (cargo install inferno --locked, ~1-2 min)"; \
	  $(CARGO) install inferno --locked --root "$(TOOLS_CACHE)" --quiet; fi
	@mkdir -p .tools/bin && cp -p "$(TOOLS_CACHE)"/bin/inferno-* .tools/bin/
	@echo "setup: inferno ready in .tools/bin"

# The qlab's guest image: built from Debian packages once (~40 s, root: mmdebstrap), then cached in
# ~/.cache/labwarden/qlab ($$LABWARDEN_QLAB_CACHE) keyed by the package versions; ~0 s when cached.
qlab: system python
	@if [ "$$(id -u)" = 0 ]; then $(BIN)/labwarden qlab image >/dev/null && echo "setup: qlab image ready"; \
	else echo "setup: the qlab image is built as root (make setup as root once)" >&2; fi

# the suite in two phases (scripts/test-suite.sh): the tests that read no measurement on xdist
# workers, then the measured tests with the two qlab streams beside them at idle priority; short tracebacks,
# so that a CI log's excerpt reaches each failure's own error (a long one is mostly asyncio's)
test: setup
	$(BIN)/ruff check labwarden tests bench
	$(BIN)/mypy
	PATH="$(CURDIR)/.tools/bin:$$PATH" scripts/test-suite.sh $(BIN)/pytest --tb=short $(PYTEST_ARGS)

# the tests marked `long` (tests/conftest.py): a fleet of their own, another reboot
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
