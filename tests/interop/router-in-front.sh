#!/usr/bin/env bash
# Starts a server on a free port and `memfleet router` on PORT in front of it (a one-server
# pool), for the interop suites' "through the router" runs:
#   scripts/interop --server-cmd "tests/interop/router-in-front.sh target/debug/memfleet {port}"
# The server is `memfleet server`, or the command in MEMFLEET_INTEROP_UPSTREAM with {port}
# replaced (e.g. a memcached -S). OPTION... are pool settings in the router's TOML: `name`
# is `name = true` (e.g. remote_markers), `name=value` is written as it is (e.g.
# auth_mechanism="sasl"); without any the pool is a twemproxy YAML pool. An OPTION starting
# with -- (e.g. --auth-file=PATH) is the router's own, passed on as it is. The router runs
# in the foreground; scripts/interop stops both (one process group).
set -euo pipefail
bin="$1" port="$2"
shift 2
router_args=() pool_options=()
for option in "$@"; do
    case "$option" in
        --*) router_args+=("$option") ;;
        *=*) pool_options+=("${option%%=*} = ${option#*=}") ;;
        *) pool_options+=("$option = true") ;;
    esac
done
server_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
if [ -n "${MEMFLEET_INTEROP_UPSTREAM:-}" ]; then
    ${MEMFLEET_INTEROP_UPSTREAM//\{port\}/$server_port} &
else
    "$bin" server -l 127.0.0.1 -p "$server_port" &
fi
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$server_port") 2>/dev/null && break; sleep 0.05; done
if [ "${#pool_options[@]}" -gt 0 ]; then
    {
        printf '[pools.one]\nlisten = "127.0.0.1:%s"\nservers = ["127.0.0.1:%s"]\n' "$port" "$server_port"
        printf '%s\n' "${pool_options[@]}"
    } >"$dir/router.toml"
    "$bin" router --config "$dir/router.toml" -t 1 "${router_args[@]}"
else
    printf 'one:\n  listen: 127.0.0.1:%s\n  hash: fnv1a_64\n  distribution: ketama\n  servers:\n    - 127.0.0.1:%s:1\n' \
        "$port" "$server_port" >"$dir/router.yml"
    "$bin" router --twemproxy "$dir/router.yml" -t 1 "${router_args[@]}"
fi
