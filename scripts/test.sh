#!/usr/bin/env bash
# The whole test suite: lint, types, layer contracts, then unit, integration and end-to-end tests.
set -uo pipefail
cd "$(dirname "$0")/.."
export TALLY_ENV=test
status=0
echo "== ruff";  .venv/bin/ruff check . && .venv/bin/ruff format --check . || status=1
echo "== mypy";  .venv/bin/mypy . || status=1
echo "== layers"; .venv/bin/lint-imports || status=1
run_pytest() {
  .venv/bin/python -m pytest "$@"
  local code=$?
  if [ $code -eq 5 ]; then echo "pytest: no tests collected for $* (treated as a failure: the suite must not be empty)"; return 1; fi
  return $code
}
echo "== unit";        run_pytest -q tests/unit || status=1
echo "== integration"; run_pytest -q --durations=12 tests/integration || status=1
echo "== e2e";         run_pytest -q --durations=5 tests/e2e || status=1
echo "== faults";      run_pytest -q tests/faults || status=1
exit $status
