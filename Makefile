# Tally: the two commands are `make demo` (run everything with traffic) and `make test`.
.PHONY: setup demo up down status test test-unit test-integration test-e2e test-long test-faults lint bench bench-quick bench-soak clean

VENV_STAMP := .venv/.installed-stamp

$(VENV_STAMP): pyproject.toml constraints.txt requirements.lock scripts/setup-python.sh
	bash scripts/setup-python.sh
	touch $@

## setup: venv + pinned Python packages (uv from requirements.lock; TALLY_PIP=1: pip) + Kafka/Spark jars from Maven Central
setup: $(VENV_STAMP)
	.venv/bin/tally setup

## demo: set up, start the whole stack with generated traffic, print the dashboard URL
demo: setup
	.venv/bin/tally up --traffic

up: setup
	.venv/bin/tally up

down:
	@if [ -x .venv/bin/tally ]; then .venv/bin/tally down; fi

status:
	.venv/bin/tally status

## test: set up, then ruff + mypy + layer contracts + unit + integration + e2e + fault tests
test: setup tracker/node_modules
	bash scripts/install-browser.sh
	bash scripts/test.sh

## tracker/node_modules: terser, esbuild and web-vitals, to check the committed snippet and vitals builds (npm run build in tracker/)
tracker/node_modules: tracker/package.json tracker/package-lock.json
	cd tracker && npm ci --silent --no-audit --no-fund
	touch $@

test-unit: setup
	TALLY_ENV=test .venv/bin/python -m pytest -q -n auto tests/unit

test-integration: setup
	TALLY_ENV=test .venv/bin/python -m pytest -q tests/integration

test-e2e: setup tracker/node_modules
	bash scripts/install-browser.sh
	TALLY_ENV=test .venv/bin/python -m pytest -q tests/e2e

## test-long: the full-length fault, scale, fuzz, soak and restart runs (tests marked `long`; not in CI)
test-long: setup
	bash scripts/install-browser.sh
	TALLY_ENV=test TALLY_LONG_TESTS=1 .venv/bin/python -m pytest -q -m long tests

## test-faults: every fault test, the full-length ones too (kill -9, broker outage; 0 lost, 0 doubled)
test-faults: setup
	TALLY_ENV=test TALLY_LONG_TESTS=1 .venv/bin/python -m pytest -q -s tests/faults

## lint: ruff, mypy and the layer contracts (import-linter, [tool.importlinter] in pyproject.toml)
lint: setup
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy . && .venv/bin/lint-imports

## bench: run every benchmark in bench/ several times and write docs/BENCHMARKS.md
bench: setup
	.venv/bin/python -m bench

## bench-quick: the same with short runs (a smoke test of the harness; the file says so)
bench-quick: setup
	.venv/bin/python -m bench --quick

## bench-soak: 30 minutes at half of peak ingest rate; resident memory slope per process
bench-soak: setup
	.venv/bin/python -m bench --only soak

clean: down
	rm -rf .tally
