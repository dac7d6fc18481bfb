#!/usr/bin/env bash
# Make sure the system packages that py-libp2p's `fastecdsa` needs to compile are present:
# a C compiler, the Python headers of the interpreter in use, and GMP's headers (libgmp-dev);
# and Chromium, the browser the explorer's tests drive through Playwright (Playwright's own browser
# download is not used: the distribution's package is).
# Only the full set-up (`make test`, `make bench`: the net/dev/ray/web/hf extras) runs this. `make run` does
# not: the core (the simulation) is all wheels and needs no compiler and no system package.
# Installs them with apt-get when run as root (or with sudo) on Debian/Ubuntu; otherwise says what to do.
set -euo pipefail
PYTHON="${PYTHON:-python3}"

missing=()
command -v gcc >/dev/null 2>&1 || missing+=(build-essential)
inc=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$inc/Python.h" ] || missing+=(python3-dev)
gmp_found=0
for d in /usr/include /usr/local/include /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu /opt/homebrew/include; do
  [ -f "$d/gmp.h" ] && gmp_found=1
done
[ "$gmp_found" = 1 ] || missing+=(libgmp-dev)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
# `docker-compose config` validates the compose files the tests write (no Docker engine needed)
command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "system packages needed (py-libp2p's fastecdsa build, the explorer's browser tests): ${missing[*]}"
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "error: not root and no sudo; run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
else
  echo "error: install ${missing[*]} (gcc, the Python headers, GMP headers, chromium, docker-compose) with your package manager" >&2
  exit 1
fi
