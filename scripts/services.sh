#!/usr/bin/env bash
# Starts the local servers the test suite talks to, if they are down, and waits until each
# answers. Idempotent. Usage: scripts/services.sh [postgres] [mysql] ... (default: all needed).
# The start commands are the machine's own (see docs/testing.md).
set -euo pipefail

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(postgres mysql redis rabbitmq nats mqtt)

log() { printf '[services] %s\n' "$*" >&2; }

wait_for() { # name, check command...
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then log "$name is up"; return 0; fi
    sleep 1
  done
  log "$name did not come up within 60 s"; return 1
}

apt_install() {
  log "installing $* (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "$@" >/dev/null
}

for svc in "${want[@]}"; do
  case "$svc" in
    postgres)
      command -v pg_ctlcluster >/dev/null || apt_install postgresql
      if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
        log "starting PostgreSQL"
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start || true
      fi
      wait_for PostgreSQL pg_isready -h 127.0.0.1 -p 5432 -q
      ;;
    mysql)
      command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server
      if ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
        log "starting MariaDB"
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
      fi
      wait_for MariaDB mariadb-admin -h 127.0.0.1 -uroot ping
      ;;
    redis)
      command -v redis-server >/dev/null || apt_install redis-server
      if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
        log "starting Redis"
        mkdir -p /var/lib/redis /var/log/redis
        redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
          --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
      fi
      wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping
      ;;
    rabbitmq)
      command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
      if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
        log "starting RabbitMQ"
        rabbitmq-server -detached || true
      fi
      wait_for RabbitMQ bash -c 'exec 3<>/dev/tcp/127.0.0.1/5672'
      ;;
    nats)
      [ -x /usr/sbin/nats-server ] || apt_install nats-server
      if ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
        log "starting NATS (JetStream)"
        mkdir -p /var/lib/nats-server
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
          -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
      fi
      wait_for NATS bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222'
      ;;
    mqtt)
      command -v mosquitto >/dev/null || apt_install mosquitto
      if ! (exec 3<>/dev/tcp/127.0.0.1/1883) 2>/dev/null; then
        log "starting Mosquitto"
        mosquitto -d -c /etc/mosquitto/mosquitto.conf || true
      fi
      wait_for Mosquitto bash -c 'exec 3<>/dev/tcp/127.0.0.1/1883'
      ;;
    *) log "unknown service $svc"; exit 2 ;;
  esac
done
