#!/usr/bin/env bash
# Create .venv with Python 3.11 and install Tally with the pinned versions.
#
# uv (pinned below) installs requirements.lock, which is generated from pyproject.toml and
# constraints.txt and pins the same versions (tests/unit/test_lockfile.py checks it). Plain pip with
# constraints.txt is the fallback: TALLY_PIP=1 asks for it, and it is used by itself where the lock
# does not apply (not Linux) or uv cannot be installed.
#
#   bash scripts/setup-python.sh          # what `make setup` runs
#   TALLY_PIP=1 make setup                # plain pip instead of uv
#   bash scripts/setup-python.sh --lock   # rewrite requirements.lock after changing constraints.txt
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
LOCK=requirements.lock
# uv lives outside the clone, one per version and machine, so a fresh clone or a new .venv reuses it.
UV_HOME=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/tally/uv-$UV_VERSION
UV=$UV_HOME/bin/uv

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

create_venv_with_python() {
  [ -x .venv/bin/python ] && return 0
  echo "setup: creating .venv with $py"
  "$py" -m venv .venv || { echo "setup: '$py -m venv' failed: install the venv module (apt install python3.11-venv)." >&2; exit 2; }
}

install_with_pip() {
  create_venv_with_python
  echo "setup: installing Python packages with pip (pinned by constraints.txt)"
  .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip --upgrade >/dev/null
  .venv/bin/python -m pip install --quiet --upgrade pip setuptools wheel
  if ! .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'; then
    echo "setup: pip install failed; check that PyPI is reachable (or set PIP_INDEX_URL) and rerun." >&2
    exit 2
  fi
}

# uv comes from PyPI like any package: pip installs it into a small venv of its own, built aside and
# renamed into place, so two set-ups at once never see half of one.
bootstrap_uv() {
  [ -x "$UV" ] && return 0
  echo "setup: installing uv $UV_VERSION into $UV_HOME"
  mkdir -p "$(dirname "$UV_HOME")"
  local partial
  partial=$(mktemp -d "$UV_HOME.partial.XXXXXX")
  if "$py" -m venv "$partial" && "$partial/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"; then
    mv -T "$partial" "$UV_HOME" 2>/dev/null || rm -rf "$partial"
  else
    rm -rf "$partial"
  fi
  [ -x "$UV" ]
}

# uv reads no PIP_* variables: carry over the index, local wheels and CA bundle that pip is told to use.
use_pip_settings_for_uv() {
  if [ -n "${PIP_INDEX_URL:-}" ] && [ -z "${UV_DEFAULT_INDEX:-}" ]; then export UV_DEFAULT_INDEX="$PIP_INDEX_URL"; fi
  if [ -n "${PIP_FIND_LINKS:-}" ] && [ -z "${UV_FIND_LINKS:-}" ]; then export UV_FIND_LINKS="$PIP_FIND_LINKS"; fi
  if [ -n "${PIP_CERT:-}" ] && [ -z "${SSL_CERT_FILE:-}" ]; then export SSL_CERT_FILE="$PIP_CERT"; fi
  export UV_PYTHON_DOWNLOADS=never
}

write_lock() {
  echo "setup: resolving pyproject.toml (extra dev) within constraints.txt into $LOCK"
  echo '-e .[dev]' | "$UV" pip compile --quiet - --constraints constraints.txt \
    --python-version 3.11 --python-platform linux --generate-hashes \
    --custom-compile-command "bash scripts/setup-python.sh --lock" --output-file "$LOCK"
  echo "setup: wrote $LOCK; commit it with constraints.txt (tests/unit/test_lockfile.py compares the two)"
}

# Runs uv on its cache alone first, and online only if that fails. Online, uv downloads a cached source
# archive again whenever its HTTP cache entry is stale, which is every time where the index sends no cache
# headers (the one reached here sends none); pyspark's is 450 MB and takes a minute to build. The lock's
# hashes make the cached copy as good as a new one.
uv_cached_first() {
  "$UV" "$@" --offline >/dev/null 2>&1 || "$UV" "$@"
}

install_with_uv() {
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $py"
    # --seed: pip, setuptools and wheel, as in a venv made by Python and upgraded by the pip path
    uv_cached_first venv --quiet --seed --allow-existing --python "$py" .venv ||
      { echo "setup: uv could not create .venv; rerun, or use plain pip: TALLY_PIP=1 make setup" >&2; exit 2; }
  fi
  echo "setup: installing Python packages with uv $UV_VERSION from $LOCK (the versions of constraints.txt)"
  # install, not sync: like pip, it leaves alone what an operator added by hand (Authlib for single sign-on).
  # --no-deps: the lock is the whole resolution, so nothing is downloaded only to read its dependencies.
  if ! uv_cached_first pip install --quiet --no-deps --python .venv/bin/python -r "$LOCK"; then
    echo "setup: uv could not install $LOCK; check that PyPI is reachable (or set PIP_INDEX_URL) and rerun," >&2
    echo "       or install with plain pip instead: TALLY_PIP=1 make setup" >&2
    exit 2
  fi
}

case "${1:-}" in
  "" | --lock) ;;
  *) echo "usage: bash scripts/setup-python.sh [--lock]" >&2; exit 2 ;;
esac
if ! py=$(find_python); then
  echo "setup: Python 3.11 is required and was not found (tried \$PYTHON, python3.11, python3)." >&2
  echo "       Install it (e.g. pyenv install 3.11, or apt install python3.11 python3.11-venv) and rerun." >&2
  exit 2
fi

if [ "${1:-}" = "--lock" ]; then
  bootstrap_uv || { echo "setup: uv $UV_VERSION could not be installed, and the lock needs it; check that PyPI is reachable." >&2; exit 2; }
  use_pip_settings_for_uv
  write_lock
elif [ "${TALLY_PIP:-0}" != 0 ]; then
  install_with_pip
elif [ "$(uname -s)" != Linux ]; then
  echo "setup: $LOCK is resolved for Linux; on $(uname -s) pip resolves constraints.txt instead"
  install_with_pip
elif ! bootstrap_uv; then
  echo "setup: uv $UV_VERSION could not be installed; falling back to plain pip (TALLY_PIP=1 skips uv)" >&2
  install_with_pip
else
  use_pip_settings_for_uv
  install_with_uv
fi
