# turnlake: `make run` installs, seeds a demo lake and opens the workbench; `make test` tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAKE   ?= data/lake
PORT   ?= 8501
HOST   ?= 127.0.0.1

.PHONY: install run demo test test-fast lint docs bench bench-full bench-10m clean ts-types

install: $(STAMP)

# torch goes first: its CPU build is pinned; an unpinned torch would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml requirements-torch.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-torch.txt
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	@if [ -d "$(LAKE)/tables/turn_logs" ]; then echo "demo lake already at $(LAKE)"; \
	else $(BIN)/turnlake demo --lake $(LAKE) --users 12 --turns 600; fi

# The local demo: no sign-in (TURNLAKE_WORKBENCH_AUTH=local), so only on the loopback address.
run: demo
	TURNLAKE_LAKE=$(LAKE) TURNLAKE_WORKBENCH_AUTH=local $(BIN)/streamlit run app/main.py \
		--server.address $(HOST) --server.port $(PORT) \
		--server.headless true --browser.gatherUsageStats false

# The suite runs in TEST_WORKERS processes (pytest-xdist): much of it waits on servers and
# subprocesses, so two workers take about half the time on 2 cores. Each worker loads the
# embedding model (~1 GB), so not one per core on a big machine. Tests that must not share the
# machine with one another carry the same xdist_group mark (--dist loadgroup); TEST_WORKERS=0
# runs everything in one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup

test: install
	$(PYTEST)

test-fast: install
	$(PYTEST) -m "not slow"

lint: install
	$(BIN)/ruff check lake pipeline app turnlake tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The docs site (mkdocs.yml): strict, so a broken link or a page left out of the nav fails.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The TypeScript client's types, regenerated from the service's OpenAPI document (the app
# factory's); commit clients/typescript/openapi.json and src/generated/openapi.ts after it.
ts-types: install
	cd clients/typescript && (test -d node_modules || npm ci --no-audit --no-fund) && \
		TURNLAKE_PYTHON=$(CURDIR)/$(BIN)/python npm run --silent types

bench: install
	$(BIN)/python -m bench.run --quick
	$(BIN)/python -m bench.compare --quick

bench-full: install
	$(BIN)/python -m bench.run --full
	$(BIN)/python -m bench.compare --full

# ten million rows: ~26 GB of disk and about an hour of an idle 2-core machine
bench-10m: install
	$(BIN)/python -m bench.scale_10m

clean:
	rm -rf $(VENV) data build site *.egg-info
