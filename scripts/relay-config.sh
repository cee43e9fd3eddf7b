# Sourced by the measurement scripts (adopt-cost.sh, drain-daemon.sh). relay_config writes the
# smallest relay configuration for one store, every topic routed to one Redis stream.
#   relay_config STORE_NAME URL STREAM [STORE_LINES]
relay_config() {
  printf '[relay]\n[[stores]]\nname = "%s"\nurl = "%s"\n%s' "$1" "$2" "${4:+$4
}"
  printf '[destinations.stream.transport]\ntype = "redis"\nurl = "redis://127.0.0.1:6379"\nstream = "%s"\n' "$3"
  printf '[[routes]]\ntopic = "#"\ndestinations = ["stream"]\n'
}

# The `outbox` binary of a profile (debug or release): $OUTBOX if set, else the build under
# CARGO_TARGET_DIR (the CI cache), built first if missing.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/outbox-target}"
outbox_binary() {
  local bin="${OUTBOX:-$CARGO_TARGET_DIR/$1/outbox}"
  if [ ! -x "$bin" ]; then
    if [ "$1" = release ]; then cargo build --release --quiet -p outbox-cli >&2 || return 1
    else cargo build --quiet -p outbox-cli >&2 || return 1; fi
  fi
  echo "$bin"
}
