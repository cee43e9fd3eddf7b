#!/usr/bin/env bash
# A real MySQL server (not MariaDB) for the MySQL test run of scripts/test.sh, beside the shared
# MariaDB on 3306, which it never touches.
#
#   scripts/mysql.sh install   downloads and unpacks MySQL (idempotent; instant when cached)
#   scripts/mysql.sh start     starts it on 127.0.0.1:$OUTBOX_MYSQL_PORT (33061), initializing
#                              its data directory the first time; prints the test URL
#   scripts/mysql.sh stop      stops the server `start` started (by its pid file)
#   scripts/mysql.sh url       prints the test URL (mysql://outbox:outbox@127.0.0.1:33061/test)
#   scripts/mysql.sh test      runs the MySQL/MariaDB tests of outbox-store, outbox-relay,
#                              outbox-inbox and outbox-cli (its admin API's) against this
#                              server (started if needed), from the test binaries
#                              `cargo test --workspace --no-run` built: nothing is compiled
#                              (a `cargo test -p ...` could rebuild with other features)
#
# Where it comes from: the only MySQL server any registry reachable here ships is Debian's
# `mysql-server-core` in unstable (sid), 9.7.4 when this was written; stable (bookworm, trixie),
# testing (forky), backports and experimental have none, and PyPI, npm and crates.io carry no
# server binary (the MySQL 8.0 / 8.4 builds live only on MySQL's own download site). It is not
# installed into the system: apt resolves `mysql-server-core` and its whole library closure
# (glibc 2.43 included, which bookworm's 2.36 cannot replace) against sid in a private apt
# root, downloads the .debs, and `dpkg-deb -x` unpacks them into
# ~/.cache/outbox/mysql/<debian version>. mysqld then runs under that root's own dynamic loader
# and libraries. Which version apt resolves is sid's of the day: the install prints it, and
# `start` prints what the server reports.
#
# The server: data in ~/.cache/outbox/mysql-data/<version>; binary logging on (MySQL's
# default), with log_bin_trust_function_creators = 1, the setting a user without SUPER needs to
# create the outbox's triggers (docs/schema.md); performance schema and X protocol off; small
# redo log and buffer pool: 300 to 450 MB of memory, 250 MB of disk for the data directory and
# 180 MB for the binaries. The tests connect as `outbox` (password `outbox`, test only), not as
# root: a user with privileges on the test databases only (`outbox\_t\_%` and `test`), whose
# password check is MySQL's caching_sha2_password (the only password plugin MySQL 9 has) over
# plain TCP, as an application's would be. Root (no password) is for this script.
set -euo pipefail

CACHE="${OUTBOX_MYSQL_DIR:-$HOME/.cache/outbox/mysql}"
DATA_ROOT="${OUTBOX_MYSQL_DATA_DIR:-$HOME/.cache/outbox/mysql-data}"
PORT="${OUTBOX_MYSQL_PORT:-33061}"

log() { printf '[mysql] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The Debian archive this machine's apt already uses (its main archive, not the security one).
debian_mirror() {
  local m
  m=$(
    {
      grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{ for (i = 2; i <= NF; i++) print $i }'
      grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
        sed -E 's/\[[^]]*\]//' | awk '{ print $2 }'
    } | grep -E '^https?://' | grep -Ev 'security|ports' | grep -E '/debian/?$' | head -1
  )
  [ -n "$m" ] || die "no Debian archive found in /etc/apt/sources.list{,.d}; cannot fetch MySQL"
  echo "${m%/}"
}

installed_root() { # the unpacked root of the installed version, or nothing
  [ -f "$CACHE/current/.installed" ] && readlink -f "$CACHE/current"
}

cmd_install() {
  local root
  if root=$(installed_root); then
    log "installed: MySQL $(basename "$root") in $root"
    return 0
  fi
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs apt-get and dpkg-deb (Debian)"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || die "$keyring is missing (apt-get install debian-archive-keyring)"
  local mirror start=$SECONDS
  mirror=$(debian_mirror)
  mkdir -p "$CACHE"
  local work
  work=$(mktemp -d "$CACHE/install.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  mkdir -p "$work"/{lists/partial,archives/partial,parts,prefs} && : >"$work/status"
  echo "deb [signed-by=$keyring] $mirror sid main" >"$work/sources.list"
  # A private apt: its own sources, lists, cache and (empty) dpkg status, so apt resolves the
  # whole dependency closure and nothing of the system's apt state is read or changed.
  cat >"$work/apt.conf" <<EOF
Dir::State "$work";
Dir::State::Lists "$work/lists";
Dir::State::status "$work/status";
Dir::Cache "$work";
Dir::Cache::Archives "$work/archives";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Dir::Etc::SourceList "$work/sources.list";
Dir::Etc::SourceParts "$work/parts";
Dir::Etc::Preferences "$work/preferences";
Dir::Etc::PreferencesParts "$work/prefs";
Debug::NoLocking "true";
Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled "false";
APT::Update::Post-Invoke "";
APT::Update::Post-Invoke-Success "";
APT::Install-Recommends "false";
EOF
  log "resolving mysql-server-core in Debian sid ($mirror)"
  APT_CONFIG="$work/apt.conf" apt-get -qq update >"$work/update.log" 2>&1 ||
    { cat "$work/update.log" >&2; die "apt-get update (sid) failed"; }
  APT_CONFIG="$work/apt.conf" apt-get -qq -y --download-only install mysql-server-core >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; die "downloading mysql-server-core failed"; }
  local core version
  core=$(ls "$work"/archives/mysql-server-core_*.deb)
  version=$(dpkg-deb -f "$core" Version)
  local dest="$CACHE/$version"
  rm -rf "$dest" "$dest.partial"
  mkdir -p "$dest.partial"
  local deb n=0
  for deb in "$work"/archives/*.deb; do
    case "$(basename "$deb")" in
      perl_* | perl-* | libperl*) continue ;; # only the mysqld_multi/mysqldumpslow scripts use perl
    esac
    dpkg-deb -x "$deb" "$dest.partial"
    n=$((n + 1))
  done
  # Only the server runs from here: drop the command-line tools and the documentation.
  rm -rf "$dest.partial"/usr/bin "$dest.partial"/usr/share/{doc,man,locale,lintian,bug}
  mv "$dest.partial" "$dest"
  "$dest/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$dest/usr/lib/x86_64-linux-gnu" \
    "$dest/usr/sbin/mysqld" --version >&2 || die "the unpacked mysqld does not run"
  touch "$dest/.installed"
  ln -sfn "$version" "$CACHE/current"
  # Older versions (sid moved on) are not kept, nor their data directories (unless running).
  local old
  for old in "$CACHE"/*; do
    case "$old" in "$dest" | "$CACHE/current") ;; *) rm -rf "$old" ;; esac
  done
  for old in "$DATA_ROOT"/*; do
    [ -d "$old" ] && [ "$old" != "$DATA_ROOT/$version" ] || continue
    kill -0 "$(cat "$old/run/mysqld.pid" 2>/dev/null || echo none)" 2>/dev/null || rm -rf "$old"
  done
  log "installed MySQL $version from $n packages in $((SECONDS - start)) s: $dest ($(du -sh "$dest" | cut -f1))"
}

url() { echo "mysql://outbox:outbox@127.0.0.1:$PORT/test"; }

client() { mariadb --no-defaults --protocol=TCP -h 127.0.0.1 -P "$PORT" -uroot "$@"; }

# The test database and user, and no test database a killed earlier run left behind.
prepare() {
  client <<'SQL'
CREATE DATABASE IF NOT EXISTS test;
CREATE USER IF NOT EXISTS outbox@'%' IDENTIFIED BY 'outbox';
ALTER USER outbox@'%' IDENTIFIED BY 'outbox';
GRANT ALL ON `outbox\_t\_%`.* TO outbox@'%';
GRANT ALL ON test.* TO outbox@'%';
SQL
  client -N -e "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'outbox\\_t\\_%'" |
    while read -r db; do [ -n "$db" ] && client -e "DROP DATABASE IF EXISTS \`$db\`"; done
}

cmd_start() {
  local root pid
  root=$(installed_root) || die "not installed: run scripts/mysql.sh install"
  command -v mariadb >/dev/null || die "needs the mariadb client (scripts/services.sh mysql installs it)"
  local version data run
  version=$(basename "$root")
  data="$DATA_ROOT/$version/data"
  run="$DATA_ROOT/$version/run"
  mkdir -p "$run" "$DATA_ROOT/$version/files"
  local mysqld=(
    "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$root/usr/lib/x86_64-linux-gnu"
    "$root/usr/sbin/mysqld" --no-defaults --user=root --basedir="$root/usr"
    --lc-messages-dir="$root/usr/share/mysql" --character-sets-dir="$root/usr/share/mysql/charsets"
    --plugin-dir="$root/usr/lib/mysql/plugin" --datadir="$data"
    --innodb-redo-log-capacity=64M --innodb-buffer-pool-size=128M
  )
  if pid=$(cat "$run/mysqld.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null && client -e 'SELECT 1' >/dev/null 2>&1; then
    log "already running (pid $pid)"
    prepare
    url
    return 0
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    die "port $PORT is taken by another process; set OUTBOX_MYSQL_PORT"
  fi
  if [ ! -f "$data/.initialized" ]; then
    log "initializing $data"
    rm -rf "$data"
    "${mysqld[@]}" --initialize-insecure --log-error="$run/initialize.log" ||
      { cat "$run/initialize.log" >&2; die "mysqld --initialize-insecure failed"; }
    touch "$data/.initialized"
  fi
  rm -f "$run/mysqld.pid"
  # Binary logging stays on (MySQL's default); only what a throwaway test server does not need
  # is switched off or made small. Durability is relaxed (no fsync per commit): the data is
  # thrown away.
  "${mysqld[@]}" --port="$PORT" --bind-address=127.0.0.1 --socket="$run/mysqld.sock" \
    --pid-file="$run/mysqld.pid" --log-error="$run/error.log" --secure-file-priv="$DATA_ROOT/$version/files" \
    --mysqlx=OFF --performance-schema=OFF --max-connections=500 --log-bin-trust-function-creators=1 \
    --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 --binlog-expire-logs-seconds=3600 \
    --max-binlog-size=64M </dev/null >>"$run/stdout.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    if client -e 'SELECT 1' >/dev/null 2>&1; then break; fi
    kill -0 "$pid" 2>/dev/null || { tail -20 "$run/error.log" >&2; die "mysqld exited while starting"; }
    sleep 0.5
  done
  client -e 'SELECT 1' >/dev/null 2>&1 || { tail -20 "$run/error.log" >&2; die "mysqld did not accept connections within 60 s"; }
  prepare
  log "MySQL $(client -N -e 'SELECT VERSION()') is up on 127.0.0.1:$PORT (pid $pid, data $data)"
  url
}

cmd_stop() {
  local root pid
  root=$(installed_root) || { log "not installed"; return 0; }
  local run="$DATA_ROOT/$(basename "$root")/run"
  pid=$(cat "$run/mysqld.pid" 2>/dev/null) || { log "not running (no pid file)"; return 0; }
  if ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$run/mysqld.pid"
    log "not running"
    return 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || { log "stopped (pid $pid)"; return 0; }
    sleep 0.5
  done
  die "mysqld (pid $pid) did not stop within 60 s"
}

# The MySQL tests are the ones whose name contains `mysql` or `mariadb` (each suite's module
# per dialect); the binaries and their package directories come from cargo's own build plan.
cmd_test() {
  local url
  url=$(cmd_start)
  local list
  list=$(mktemp)
  cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m.get("profile", {}).get("test"):
        continue
    pkg = m["package_id"]
    for crate in ("outbox-store", "outbox-relay", "outbox-inbox", "outbox-cli", "outbox-adopt"):
        if ("/" + crate + "#") in pkg or pkg.startswith(crate + " "):  # cargo >= 1.77, older
            print(crate, os.path.dirname(m["manifest_path"]), m["executable"])
' >"$list"
  [ -s "$list" ] || { rm -f "$list"; die "cargo test --workspace --no-run listed no test binary of outbox-store, outbox-relay, outbox-inbox, outbox-cli or outbox-adopt"; }
  local crate dir exe failed=0 out
  out=$(mktemp)
  while read -r crate dir exe; do
    echo "== MySQL $(basename "$(installed_root)"): $crate $(basename "$exe")"
    (cd "$dir" && CARGO_MANIFEST_DIR="$dir" OUTBOX_TEST_MYSQL_URL="$url" "$exe" mysql mariadb) </dev/null |
      tee -a "$out" || failed=1
  done <"$list"
  local passed failures
  passed=$(awk '/^test result:/ { n += $4 } END { print n + 0 }' "$out")
  failures=$(awk '/^test result:/ { n += $6 } END { print n + 0 }' "$out")
  rm -f "$list" "$out"
  echo "MySQL: $passed passed, $failures failed"
  [ "$passed" -gt 0 ] || die "no MySQL test ran (were the suites' mysql modules renamed?)"
  return "$failed"
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  url) url ;;
  test) cmd_test ;;
  *) echo "usage: $0 install|start|stop|url|test" >&2; exit 2 ;;
esac
