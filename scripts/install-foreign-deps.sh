#!/usr/bin/env bash
# Installs what the foreign-language enqueue examples (examples/python, examples/java) and
# their tests (crates/outbox-store/tests/foreign.rs) need:
#   - python3 with psycopg 3 and PyMySQL (examples/python/requirements.txt, via pip)
#   - a JDK (javac) and the PostgreSQL and MariaDB JDBC drivers (Debian packages)
#   - OpenSSL's headers (libssl-dev) for librdkafka's TLS, which the kafka transport builds
#   - headless Chromium for the dashboard test (crates/outbox-cli/tests/dashboard.rs)
#   - the validators of deploy/ (crates/outbox-cli/tests/deploy.rs): kubernetes-validate (PyPI,
#     pinned, in its own venv under ~/.cache/outbox; it bundles the Kubernetes JSON schemas, so
#     it validates offline) and systemd-analyze (Debian's systemd)
# Idempotent: installs only what is missing, runs `apt-get update` only when apt has work to do.
# Non-interactive; run as root (or with sudo available) on Debian 12.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQUIREMENTS="$ROOT/examples/python/requirements.txt"
PG_JAR=/usr/share/java/postgresql.jar
MARIADB_JAR=/usr/share/java/mariadb-java-client.jar
# crates/outbox-cli/tests/deploy.rs runs the validator from this venv.
KUBERNETES_VALIDATE_VERSION=1.37.0
KUBERNETES_VALIDATE_VENV="$HOME/.cache/outbox/kubernetes-validate"
KUBERNETES_VALIDATE="$KUBERNETES_VALIDATE_VENV/bin/kubernetes-validate"

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
# librdkafka's TLS (the kafka transport, rdkafka's `ssl` feature) links the system's OpenSSL.
pkg-config --exists openssl 2>/dev/null || apt_packages+=(libssl-dev pkg-config)
command -v make >/dev/null 2>&1 || apt_packages+=(make)
# Headless Chromium for the dashboard's browser test (crates/outbox-cli/tests/dashboard.rs).
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
# `systemd-analyze verify` checks deploy/systemd/outbox-relay.service (no running systemd needed).
command -v systemd-analyze >/dev/null 2>&1 || apt_packages+=(systemd)
kubernetes_validate_ok() {
    [ "$("$KUBERNETES_VALIDATE" --version 2>/dev/null)" = "$KUBERNETES_VALIDATE_VERSION" ]
}
# Debian's python3 creates a venv only with python3-venv (its ensurepip); pyenv's has it built in.
if ! kubernetes_validate_ok && ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    apt_packages+=(python3-venv)
fi

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

# The Kubernetes manifest validator: its own venv (no PEP 668 question, no clash with the
# drivers above), recreated when missing, broken (e.g. its python is gone) or another version.
if ! kubernetes_validate_ok; then
    echo "install-foreign-deps: pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION into $KUBERNETES_VALIDATE_VENV"
    python3 -m venv --clear "$KUBERNETES_VALIDATE_VENV"
    "$KUBERNETES_VALIDATE_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
    kubernetes_validate_ok || { echo "install-foreign-deps: $KUBERNETES_VALIDATE does not run after install" >&2; exit 1; }
fi

for jar in "$PG_JAR" "$MARIADB_JAR"; do
    [ -f "$jar" ] || { echo "install-foreign-deps: $jar is still missing after install" >&2; exit 1; }
done
for tool in chromium systemd-analyze; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install-foreign-deps: $tool is still missing after install" >&2; exit 1; }
done
echo "install-foreign-deps: ok (python3 psycopg+PyMySQL, javac, $PG_JAR, $MARIADB_JAR, chromium, systemd-analyze, kubernetes-validate $KUBERNETES_VALIDATE_VERSION)"
