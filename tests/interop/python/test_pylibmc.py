"""pylibmc (libmemcached) against a memcached-compatible server.

Usage: HOST:PORT [--binary]   (text protocol by default, binary protocol with --binary)
"""

import sys
import time

import pylibmc

from harness import LARGE_SIZES, TRICKY, Suite, check, eq, parse_addr, raises, random_bytes

binary = "--binary" in sys.argv[1:]
argv = [a for a in sys.argv if a != "--binary"]
host, port = parse_addr(argv)
mc = pylibmc.Client(
    ["%s:%d" % (host, port)],
    binary=binary,
    # cas: libmemcached only fetches cas ids when asked to; timeouts keep a broken server from
    # hanging the run (milliseconds).
    behaviors={"cas": True, "connect_timeout": 3000, "receive_timeout": 3_000_000,
               "send_timeout": 3_000_000, "_poll_timeout": 3000, "tcp_nodelay": True},
)


def false_or_not_found(fn):
    try:
        return fn()
    except pylibmc.NotFound:
        return False


# libmemcached 1.0.16 (bundled in the pylibmc wheel) waits for its poll timeout (3 s) after a
# binary TOUCH reply that carries the 4-byte flags extras memcached sends; the touch itself
# succeeds. A separate client with a short poll timeout keeps the touch test fast.
toucher = mc.clone()
if binary:
    toucher.behaviors = {"_poll_timeout": 250}

s = Suite("pylibmc-binary" if binary else "pylibmc-text")
k = s.key


@s.case
def set_get():
    eq(mc.set(k("a"), b"hello"), True, "set")
    eq(mc.get(k("a")), b"hello", "get")
    eq(mc.set(k("a"), TRICKY), True, "overwrite with protocol bytes inside")
    eq(mc.get(k("a")), TRICKY, "get overwritten")
    eq(mc.set(k("empty"), b""), True, "set empty")
    eq(mc.get(k("empty")), b"", "get empty value")
    long_key = k("L").ljust(250, "x")
    eq(mc.set(long_key, b"250"), True, "set 250-byte key")
    eq(mc.get(long_key), b"250", "get 250-byte key")


@s.case
def miss():
    eq(mc.get(k("never-set")), None, "get of a missing key")
    eq(mc.get(k("never-set"), "dflt"), "dflt", "get with default")
    eq(mc.gets(k("never-set")), (None, None), "gets of a missing key")


@s.case
def multi_get():
    eq(mc.set_multi({k("m1"): b"1", k("m2"): b"22", k("m3"): b"333"}), [], "set_multi failures")
    got = mc.get_multi([k("m1"), k("missing"), k("m2"), k("m3")])
    eq(got, {k("m1"): b"1", k("m2"): b"22", k("m3"): b"333"}, "get_multi")
    eq(mc.get_multi([k("missing1"), k("missing2")]), {}, "get_multi of only misses")


@s.case
def add_replace():
    eq(mc.add(k("ar"), b"first"), True, "add of a new key")
    eq(mc.add(k("ar"), b"second"), False, "add of an existing key")
    eq(mc.get(k("ar")), b"first", "value after failed add")
    eq(mc.replace(k("ar"), b"third"), True, "replace of an existing key")
    eq(mc.get(k("ar")), b"third", "value after replace")
    # Text protocol: NOT_STORED (False); binary protocol: status "key not found" (NotFound).
    eq(false_or_not_found(lambda: mc.replace(k("ar-missing"), b"x")), False, "replace of a missing key")
    eq(mc.get(k("ar-missing")), None, "replace must not create")


@s.case
def append_prepend():
    mc.set(k("ap"), b"mid")
    eq(mc.append(k("ap"), b"-end"), True, "append")
    eq(mc.prepend(k("ap"), b"start-"), True, "prepend")
    eq(mc.get(k("ap")), b"start-mid-end", "after append+prepend")
    eq(mc.append(k("ap-missing"), b"x"), False, "append to a missing key")


@s.case
def cas():
    mc.set(k("cas"), b"v1")
    value, token = mc.gets(k("cas"))
    eq(value, b"v1", "gets value")
    check(isinstance(token, int) and token != 0, "gets returns a cas token: %r" % (token,))
    eq(mc.cas(k("cas"), b"v2", token), True, "cas with the current token")
    eq(mc.get(k("cas")), b"v2", "value after cas")
    eq(mc.cas(k("cas"), b"v3", token), False, "cas with a stale token (EXISTS)")
    eq(mc.get(k("cas")), b"v2", "value after conflicting cas")
    _, token2 = mc.gets(k("cas"))
    check(token2 != token, "cas token changes on update")
    mc.set(k("cas"), b"v4")
    eq(mc.cas(k("cas"), b"v5", token2), False, "cas after an intervening set")
    eq(false_or_not_found(lambda: mc.cas(k("cas-missing"), b"x", token2)), False, "cas of a missing key")
    eq(mc.get(k("cas-missing")), None, "cas must not create")
    # A new item under the same key must not accept the token of the one it replaced.
    _, old = mc.gets(k("cas"))
    mc.delete(k("cas"))
    mc.set(k("cas"), b"again")
    eq(mc.cas(k("cas"), b"v6", old), False, "cas with the token of a deleted, re-set item")
    eq(mc.get(k("cas")), b"again", "value after that cas")


@s.case
def incr_decr():
    mc.set(k("n"), b"10")
    eq(mc.incr(k("n"), 5), 15, "incr")
    eq(mc.decr(k("n"), 3), 12, "decr")
    eq(mc.decr(k("n"), 100), 0, "decr clamps at 0")
    eq(mc.incr(k("n")), 1, "incr by default delta 1")
    raises(lambda: mc.incr(k("n-missing"), 1), "incr of a missing key")
    raises(lambda: mc.decr(k("n-missing"), 1), "decr of a missing key")
    eq(mc.get(k("n-missing")), None, "incr of a missing key must not create it")
    mc.set(k("n64"), b"18446744073709551615")
    eq(mc.incr(k("n64"), 1), 0, "incr wraps at 2**64")
    if not binary:
        # libmemcached 1.0.16 (bundled in the pylibmc wheel) does not know the binary status
        # "non-numeric value" and disables the server on it, so this is text protocol only.
        mc.set(k("nan"), b"abc")
        raises(lambda: mc.incr(k("nan"), 1), "incr of a non-numeric value")
        eq(mc.get(k("nan")), b"abc", "non-numeric value unchanged")


@s.case
def delete():
    mc.set(k("d"), b"x")
    eq(mc.delete(k("d")), True, "delete of an existing key")
    eq(mc.get(k("d")), None, "get after delete")
    eq(mc.delete(k("d")), False, "delete of a missing key")
    mc.set_multi({k("dm1"): b"1", k("dm2"): b"2"})
    eq(mc.delete_multi([k("dm1"), k("dm2")]), True, "delete_multi")
    eq(mc.get_multi([k("dm1"), k("dm2")]), {}, "get_multi after delete_multi")


@s.case
def touch():
    # memcached's clock ticks once a second, so a TTL of N lasts N-1..N s; memfleet may expire an
    # item up to a second earlier still (Segcache TTL buckets). TTL 3 leaves about a second for
    # the immediate checks; the deferred ones run 3.5 s later, when every short TTL is over.
    mc.set(k("t-extend"), b"x", time=3)
    mc.set(k("t-shorten"), b"y")
    eq(toucher.touch(k("t-extend"), 3600), True, "touch extending")
    eq(toucher.touch(k("t-shorten"), 3), True, "touch shortening")
    eq(toucher.touch(k("t-missing"), 10), False, "touch of a missing key")
    mc.set(k("ttl"), b"z", time=1)
    eq(mc.get(k("t-shorten")), b"y", "touched item still there")
    at = time.monotonic() + 3.5
    s.defer("touch_extended_survives", lambda: eq(mc.get(k("t-extend")), b"x", "extended item"), at)
    s.defer("touch_shortened_expires", lambda: eq(mc.get(k("t-shorten")), None, "shortened item"), at)
    s.defer("set_ttl_expires", lambda: eq(mc.get(k("ttl")), None, "item set with ttl 1"), at)


@s.case
def flags_types():
    # pylibmc encodes the Python type in the item flags: a server that drops or mangles flags
    # hands back bytes (or garbage) instead of the original type.
    values = {"int": 42, "neg": -7, "big": 2**70, "str": "héllo",
              "list": [1, "two", {"three": 3.0}], "bytes": b"\x00\x01"}
    for name, v in values.items():
        eq(mc.set(k("ty-" + name), v), True, "set %s" % name)
    for name, v in values.items():
        got = mc.get(k("ty-" + name))
        eq((type(got), got), (type(v), v), "round trip of %s" % name)
    got = mc.get_multi([k("ty-int"), k("ty-str")])
    eq(got, {k("ty-int"): 42, k("ty-str"): "héllo"}, "typed values via get_multi")


@s.case
def large_values():
    for size in LARGE_SIZES:
        v = random_bytes(size, size)
        eq(mc.set(k("big%d" % size), v), True, "set %d bytes" % size)
        got = mc.get(k("big%d" % size))
        check(got == v, "get %d bytes: got %s" % (size, None if got is None else len(got)))
    got = mc.get_multi([k("big%d" % n) for n in LARGE_SIZES])
    eq(sorted(len(v) for v in got.values()), sorted(LARGE_SIZES), "large values via get_multi")


@s.case
def too_large_rejected():
    raises(lambda: mc.set(k("huge"), b"h" * (2 * 1024 * 1024)), "set of a 2 MiB value")
    eq(mc.get(k("huge")), None, "oversized value must not be stored")
    eq(mc.set(k("after-huge"), b"ok"), True, "connection usable after oversized set")
    eq(mc.get(k("after-huge")), b"ok", "get after oversized set")


@s.case
def stats():
    st = mc.get_stats()
    eq(len(st), 1, "one server in stats")
    name, d = st[0]
    check("curr_items" in d and int(d["curr_items"]) >= 1, "stats curr_items: %r" % d.get("curr_items"))
    check("pid" in d and "uptime" in d, "stats has pid and uptime")


sys.exit(0 if s.run() else 1)
