#!/usr/bin/env bash
# Headless Chromium for the browser tests: Debian's chromium package (no downloaded browsers).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
echo "setup: installing Debian's chromium for the browser tests"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
  echo "setup: chromium is missing and this user cannot install packages; run 'apt-get install chromium' as root." >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium >/dev/null; }
