#!/usr/bin/env bash
# libmemcached-tools (Debian's memcstat, memcslap, memcaslap, memccp, memccat, memcdump, ...),
# memcached-tool's dump and php-memcached's getAllKeys against a memcached-compatible server.
# Usage: run.sh HOST:PORT
set -u

if [[ $# -ne 1 || "$1" != *:* ]]; then
    echo "usage: $0 HOST:PORT" >&2
    exit 2
fi
SERVERS="$1"
NAME=libmemcached-tools
PREFIX="it-tools-$$-$RANDOM-"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
START=$SECONDS
passed=0
failed=0

# Each check runs in a subshell; `fail MSG` ends it with a message.
fail() {
    echo "$*" >"$TMP/why"
    exit 1
}
run() {
    local name="$1"
    shift
    rm -f "$TMP/why"
    if ("$@"); then
        passed=$((passed + 1))
        echo "  ok   $NAME/$name"
    else
        failed=$((failed + 1))
        echo "  FAIL $NAME/$name: $(cat "$TMP/why" 2>/dev/null || echo "exited non-zero")"
    fi
}

# memcstat prints "Server: HOST (PORT)" and then one "\tname: value" line per statistic.
check_stats() {
    local out="$TMP/stat$1"
    shift
    timeout 10 memcstat --servers="$SERVERS" "$@" >"$out" 2>"$out.err" || fail "memcstat $* exited $?: $(head -c 300 "$out.err")"
    [[ -s "$out.err" ]] && fail "memcstat $* wrote to stderr: $(head -c 300 "$out.err")"
    grep -q '^Server: ' "$out" || fail "no 'Server:' line in: $(head -c 300 "$out")"
    local key value
    for key in pid uptime time version curr_connections total_connections cmd_get cmd_set \
        get_hits get_misses curr_items total_items bytes limit_maxbytes threads; do
        value="$(sed -n "s/^\t$key: //p" "$out")"
        [[ -n "$value" ]] || fail "stat '$key' missing; got: $(tr '\n\t' '| ' <"$out" | head -c 400)"
        if [[ "$key" != version ]]; then
            [[ "$value" =~ ^[0-9]+$ ]] || fail "stat '$key' is not a number: '$value'"
        fi
    done
    local malformed
    malformed="$(grep -v '^Server: ' "$out" | grep -cvE $'^\t[a-z_0-9:]+: ')"
    [[ "$malformed" == 0 ]] || fail "$malformed lines that are not '\\tname: value'"
    return 0
}

evictions() {
    timeout 10 memcstat --servers="$SERVERS" | sed -n 's/^\tevictions: //p'
}

# memcslap prints "Time to TEST N keys by T threads" and never fails by exit status: errors only
# show as "Fatal error" lines on stderr and a lower key count. A get that misses is also an error
# to it, so misses are only excused by evictions (the server may be full from other suites).
slap() {
    local test="$1" expect="$2"
    shift 2
    local out="$TMP/slap-$test" ev0 ev1
    ev0="$(evictions)"
    timeout 20 memcslap --servers="$SERVERS" --concurrency=4 --execute-number=500 --test="$test" "$@" \
        >"$out" 2>"$out.err" || fail "memcslap exited $?"
    ev1="$(evictions)"
    if ! grep -qE "Time to $test +$expect keys by +4 threads" "$out" || [[ -s "$out.err" ]]; then
        [[ -n "$ev0" && -n "$ev1" && "$ev1" -gt "$ev0" ]] && return 0
        fail "memcslap --test=$test $*: expected $expect keys, got: $(grep -E 'by +4 threads' "$out" | tr -s ' \n' ' ');" \
            "stderr: $(head -c 200 "$out.err"); evictions $ev0 -> $ev1"
    fi
    return 0
}

memcaslap_run() {
    local out="$TMP/aslap" ev0 ev1
    ev0="$(evictions)"
    timeout 20 memcaslap -s "$SERVERS" -T 2 -c 8 -x 20000 -X 200 -v 0.2 >"$out" 2>&1 \
        || fail "memcaslap exited $?: $(tail -c 300 "$out")"
    local get set
    get="$(sed -n 's/^cmd_get: //p' "$out" | tail -1)"
    set="$(sed -n 's/^cmd_set: //p' "$out" | tail -1)"
    [[ -n "$get" && -n "$set" && $((get + set)) -eq 20000 ]] || fail "expected 20000 ops; got get=$get set=$set"
    ev1="$(evictions)"
    local key keys=(verify_failed get_misses verify_misses)
    # Misses are excused by evictions (the server may be full from other suites); wrong data never.
    [[ -n "$ev0" && -n "$ev1" && "$ev1" -gt "$ev0" ]] && keys=(verify_failed)
    for key in "${keys[@]}"; do
        [[ "$(sed -n "s/^$key: //p" "$out" | tail -1)" == 0 ]] \
            || fail "$key is not 0: $(grep -E 'cmd_|misses|verify' "$out" | tr '\n' ' ') evictions $ev0 -> $ev1"
    done
    return 0
}

cp_cat() {
    local proto=("$@") tag="text"
    [[ $# -gt 0 ]] && tag="binary"
    local dir="$TMP/cp-$tag"
    mkdir -p "$dir"
    local small="$PREFIX$tag-small.txt" big="$PREFIX$tag-big.bin" near="$PREFIX$tag-near1m.bin"
    printf 'hello\r\nEND\r\n' >"$dir/$small"
    head -c 300000 /dev/urandom >"$dir/$big"
    head -c $((1024 * 1024 - 2048)) /dev/urandom >"$dir/$near"
    local f
    for f in "$small" "$big" "$near"; do
        timeout 10 memccp --servers="$SERVERS" "${proto[@]}" --flags=123 --basename "$dir/$f" 2>"$TMP/err" \
            || fail "memccp $f exited $?: $(head -c 200 "$TMP/err")"
        timeout 10 memccat --servers="$SERVERS" "${proto[@]}" --file="$dir/$f.out" "$f" 2>"$TMP/err" \
            || fail "memccat $f exited $?: $(head -c 200 "$TMP/err")"
        cmp -s "$dir/$f" "$dir/$f.out" \
            || fail "memccat $f: $(stat -c %s "$dir/$f.out") bytes differ from the $(stat -c %s "$dir/$f") copied"
    done
    local flags
    flags="$(timeout 10 memccat --servers="$SERVERS" "${proto[@]}" --flags "$small" | head -1)"
    [[ "$flags" == 123 ]] || fail "memccat --flags: expected 123, got '$flags'"
    timeout 10 memcexist --servers="$SERVERS" "${proto[@]}" "$small" || fail "memcexist of a stored key exited $?"
    timeout 10 memcexist --servers="$SERVERS" "${proto[@]}" "${PREFIX}missing" && fail "memcexist of a missing key succeeded"
    timeout 10 memctouch --servers="$SERVERS" "${proto[@]}" --expire=3600 "$small" || fail "memctouch exited $?"
    timeout 10 memctouch --servers="$SERVERS" "${proto[@]}" --expire=3600 "${PREFIX}missing" 2>/dev/null \
        && fail "memctouch of a missing key succeeded"
    timeout 10 memcrm --servers="$SERVERS" "${proto[@]}" "$small" || fail "memcrm exited $?"
    timeout 10 memccat --servers="$SERVERS" "${proto[@]}" "$small" >/dev/null 2>&1 && fail "memccat after memcrm found the key"
    timeout 10 memcrm --servers="$SERVERS" "${proto[@]}" "$small" 2>/dev/null && fail "memcrm of a missing key succeeded"
    return 0
}

SERVER_VERSION=""

# Key dumps: memcdump lists keys (libmemcached's memcached_dump: `stats cachedump`), and
# memcached-tool's `dump` (Debian's memcached package) reads `lru_crawler metadump all`, then
# fetches every key and prints it as an `add` command with its value.
store_dump_keys() {
    local host="${SERVERS%:*}" port="${SERVERS##*:}" i reply
    exec 3<>"/dev/tcp/$host/$port" || fail "cannot connect to $SERVERS"
    for i in 1 2 3; do
        printf 'set %sdump-%s 7 0 6\r\nvalue%s\r\n' "$PREFIX" "$i" "$i" >&3
        IFS= read -r -t 5 reply <&3 || fail "no reply to set"
        [[ "$reply" == $'STORED\r' ]] || fail "set replied '$reply'"
    done
    printf 'version\r\n' >&3
    IFS= read -r -t 5 SERVER_VERSION <&3 || fail "no reply to version"
    exec 3>&-
}

memcdump_run() {
    store_dump_keys
    timeout 20 memcdump --servers="$SERVERS" >"$TMP/memcdump" 2>"$TMP/memcdump.err" \
        || fail "memcdump exited $?: $(head -c 300 "$TMP/memcdump.err")"
    # memcached's `stats cachedump` shows only its COLD LRU, where fresh items may not be yet.
    [[ "$SERVER_VERSION" == *memfleet* ]] || return 0
    local i
    for i in 1 2 3; do
        [[ "$(grep -acxF "${PREFIX}dump-$i" "$TMP/memcdump")" == 1 ]] \
            || fail "memcdump did not list ${PREFIX}dump-$i once: $(head -c 300 "$TMP/memcdump")"
    done
    return 0
}

php_get_all_keys() {
    store_dump_keys
    timeout 20 php "$(dirname "$0")/all-keys.php" "$SERVERS" >"$TMP/allkeys" 2>"$TMP/allkeys.err" \
        || fail "php getAllKeys exited $?: $(head -c 300 "$TMP/allkeys.err")"
    # As for memcdump: memcached's cachedump may not show fresh items yet.
    [[ "$SERVER_VERSION" == *memfleet* ]] || return 0
    local i
    for i in 1 2 3; do
        [[ "$(grep -acxF "${PREFIX}dump-$i" "$TMP/allkeys")" == 1 ]] \
            || fail "getAllKeys did not return ${PREFIX}dump-$i once: $(head -c 300 "$TMP/allkeys")"
    done
    return 0
}

memcached_tool_dump() {
    local tool=/usr/share/memcached/scripts/memcached-tool
    [[ -r "$tool" ]] || fail "$tool missing (Debian's memcached package)"
    store_dump_keys
    timeout 30 perl "$tool" "$SERVERS" dump >"$TMP/tooldump" 2>"$TMP/tooldump.err" \
        || fail "memcached-tool dump exited $?: $(head -c 300 "$TMP/tooldump.err")"
    tr -d '\r' <"$TMP/tooldump" >"$TMP/tooldump.txt"
    local i
    for i in 1 2 3; do
        grep -a -A1 -xF "add ${PREFIX}dump-$i 7 0 6" "$TMP/tooldump.txt" | grep -aqxF "value$i" \
            || fail "memcached-tool dump lacks ${PREFIX}dump-$i: $(head -c 300 "$TMP/tooldump")"
    done
    return 0
}

run memcping bash -c "timeout 10 memcping --servers='$SERVERS' || { echo 'memcping exited non-zero' >'$TMP/why'; exit 1; }"
run memcstat_text check_stats text
run memcstat_binary check_stats binary --binary
run memccp_memccat_text cp_cat
run memccp_memccat_binary cp_cat --binary
# memaslap (memcaslap) in text mode only: its binary mode reports verify failures against
# memcached itself.
run memcaslap_verify memcaslap_run
run memcslap_set slap set 2000
run memcslap_get slap get 2000
run memcslap_mget slap mget 2000
run memcslap_binary_get slap get 2000 --binary
run memcdump memcdump_run
run memcached_tool_dump memcached_tool_dump
run php_getAllKeys php_get_all_keys

echo "$NAME: $passed passed, $failed failed ($((SECONDS - START))s)"
[[ $failed -eq 0 ]]
