#!/usr/bin/env bash
# Installs what the foreign-language enqueue examples (examples/python, examples/java) and
# their tests (crates/outbox-store/tests/foreign.rs) need:
#   - python3 with psycopg 3 and PyMySQL (examples/python/requirements.txt, via pip)
#   - a JDK (javac) and the PostgreSQL and MariaDB JDBC drivers (Debian packages)
#   - headless Chromium for the dashboard test (crates/outbox-cli/tests/dashboard.rs)
# Idempotent: installs only what is missing, runs `apt-get update` only when apt has work to do.
# Non-interactive; run as root (or with sudo available) on Debian 12.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQUIREMENTS="$ROOT/examples/python/requirements.txt"
PG_JAR=/usr/share/java/postgresql.jar
MARIADB_JAR=/usr/share/java/mariadb-java-client.jar

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

# Debian packages still to install, collected first so `apt-get update` runs at most once.
apt_packages=()
command -v python3 >/dev/null 2>&1 || apt_packages+=(python3)
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    apt_packages+=(python3-pip)
fi
command -v javac >/dev/null 2>&1 || apt_packages+=(openjdk-17-jdk-headless)
[ -f "$PG_JAR" ] || apt_packages+=(libpostgresql-jdbc-java)
[ -f "$MARIADB_JAR" ] || apt_packages+=(libmariadb-java)
# Headless Chromium for the dashboard's browser test (crates/outbox-cli/tests/dashboard.rs).
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)

if [ "${#apt_packages[@]}" -gt 0 ]; then
    echo "install-foreign-deps: apt-get install ${apt_packages[*]}"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi

# Python drivers: pip only when an import fails.
if ! python3 -c 'import psycopg, pymysql' >/dev/null 2>&1; then
    echo "install-foreign-deps: pip install -r examples/python/requirements.txt"
    pip_args=(--quiet --disable-pip-version-check --root-user-action=ignore -r "$REQUIREMENTS")
    # Debian's own python3 is "externally managed" (PEP 668): pip refuses to install into it
    # unless told to. A pyenv/venv python has no such marker and needs no flag.
    if python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
        pip_args+=(--break-system-packages)
    fi
    python3 -m pip install "${pip_args[@]}"
    python3 -c 'import psycopg, pymysql'
fi

for jar in "$PG_JAR" "$MARIADB_JAR"; do
    [ -f "$jar" ] || { echo "install-foreign-deps: $jar is still missing after install" >&2; exit 1; }
done
command -v chromium >/dev/null 2>&1 || { echo "install-foreign-deps: chromium is still missing after install" >&2; exit 1; }
echo "install-foreign-deps: ok (python3 psycopg+PyMySQL, javac, $PG_JAR, $MARIADB_JAR, chromium)"
