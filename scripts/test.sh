#!/usr/bin/env bash
# The whole test suite: lint, types, layer contracts, then unit, integration and end-to-end tests.
# Prints each tier's time at the end, so a change that slows the suite shows (docs/TESTING.md).
set -uo pipefail
cd "$(dirname "$0")/.."
export TALLY_ENV=test
status=0
times=()
tier() {  # tier NAME COMMAND...: run one tier, note its time and whether it failed
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@" || status=1
  times+=("$name $((SECONDS - start)) s")
}
run_pytest() {
  .venv/bin/python -m pytest "$@"
  local code=$?
  if [ $code -eq 5 ]; then echo "pytest: no tests collected for $* (treated as a failure: the suite must not be empty)"; return 1; fi
  return $code
}
lint() {  # every linter runs, whichever fails
  local failed=0
  .venv/bin/ruff check . || failed=1
  .venv/bin/ruff format --check . || failed=1
  .venv/bin/mypy . || failed=1
  .venv/bin/lint-imports || failed=1
  return $failed
}
tier "lint (ruff, mypy, layers)" lint
# Unit tests on every core (pytest-xdist): they share nothing but the machine. The other tiers run
# one test at a time: their Kafka brokers and Spark JVMs already take both cores (two workers made
# the integration tier 21% faster and timed out two of its tests).
tier "unit"        run_pytest -q -n auto --durations=10 tests/unit
tier "integration" run_pytest -q --durations=12 tests/integration
tier "e2e"         run_pytest -q --durations=5 tests/e2e
tier "faults"      run_pytest -q --durations=5 tests/faults
echo "== tier times: $(IFS=';'; echo "${times[*]}" | sed 's/;/, /g')"
exit $status
