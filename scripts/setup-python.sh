#!/usr/bin/env bash
# Create .venv with Python 3.11 and install Tally with pinned versions (constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  for candidate in "${PYTHON:-}" python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      command -v "$candidate"; return 0
    fi
  done
  return 1
}

if ! py=$(find_python); then
  echo "setup: Python 3.11 is required and was not found (tried \$PYTHON, python3.11, python3)." >&2
  echo "       Install it (e.g. pyenv install 3.11, or apt install python3.11 python3.11-venv) and rerun." >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $py"
  "$py" -m venv .venv || { echo "setup: '$py -m venv' failed: install the venv module (apt install python3.11-venv)." >&2; exit 2; }
fi
echo "setup: installing Python packages (pinned by constraints.txt)"
.venv/bin/python -m pip install --quiet --upgrade pip setuptools wheel
if ! .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'; then
  echo "setup: pip install failed; check that PyPI is reachable (or set PIP_INDEX_URL) and rerun." >&2
  exit 2
fi
