# Sourced by the measurement scripts (adopt-cost.sh, drain-daemon.sh): writes to stdout the
# smallest relay configuration for one store, every topic routed to one Redis stream.
#   relay_config STORE_NAME URL STREAM [STORE_LINES]
relay_config() {
  printf '[relay]\n[[stores]]\nname = "%s"\nurl = "%s"\n%s' "$1" "$2" "${4:+$4
}"
  printf '[destinations.stream.transport]\ntype = "redis"\nurl = "redis://127.0.0.1:6379"\nstream = "%s"\n' "$3"
  printf '[[routes]]\ntopic = "#"\ndestinations = ["stream"]\n'
}
