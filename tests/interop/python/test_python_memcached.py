"""python-memcached (module `memcache`, text protocol) against a memcached-compatible server.

Usage: HOST:PORT
"""

import sys
import time

import memcache

from harness import LARGE_SIZES, TRICKY, Suite, check, eq, parse_addr, random_bytes

host, port = parse_addr(sys.argv)
# dead_retry=0: python-memcached otherwise silently skips a server for 30 s after one error,
# which would turn a single failure into a cascade of confusing ones.
mc = memcache.Client(["%s:%d" % (host, port)], cache_cas=True, dead_retry=0, socket_timeout=3)
s = Suite("python-memcached")
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
    eq(mc.gets(k("never-set")), None, "gets of a missing key")


@s.case
def multi_get():
    eq(mc.set_multi({"m1": b"1", "m2": b"22", "m3": b"333"}, key_prefix=s.prefix), [],
       "set_multi failures")
    got = mc.get_multi([k("m1"), k("missing"), k("m2"), k("m3")])
    eq(got, {k("m1"): b"1", k("m2"): b"22", k("m3"): b"333"}, "get_multi")
    got = mc.get_multi(["m1", "m3", "missing"], key_prefix=s.prefix)
    eq(got, {"m1": b"1", "m3": b"333"}, "get_multi with key_prefix")


@s.case
def add_replace():
    eq(mc.add(k("ar"), b"first"), True, "add of a new key")
    eq(mc.add(k("ar"), b"second"), False, "add of an existing key")
    eq(mc.get(k("ar")), b"first", "value after failed add")
    eq(mc.replace(k("ar"), b"third"), True, "replace of an existing key")
    eq(mc.get(k("ar")), b"third", "value after replace")
    eq(mc.replace(k("ar-missing"), b"x"), False, "replace of a missing key")
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
    # python-memcached keeps the cas id from gets() and sends it with the next cas() of the key.
    other = memcache.Client(["%s:%d" % (host, port)], cache_cas=True, dead_retry=0)
    mc.set(k("cas"), b"v1")
    eq(mc.gets(k("cas")), b"v1", "gets value")
    check(k("cas").encode() in mc.cas_ids, "gets recorded a cas id")
    first_id = mc.cas_ids[k("cas").encode()]
    eq(mc.cas(k("cas"), b"v2"), True, "cas with the current id")
    eq(mc.get(k("cas")), b"v2", "value after cas")
    # Another client changes the item; our cas with the id from before must fail with EXISTS.
    eq(other.gets(k("cas")), b"v2", "other client's gets")
    check(other.cas_ids[k("cas").encode()] != first_id, "cas id changes on update")
    mc.gets(k("cas"))
    eq(other.cas(k("cas"), b"v3"), True, "other client's cas")
    eq(mc.cas(k("cas"), b"v4"), False, "cas with a stale id (EXISTS)")
    eq(mc.get(k("cas")), b"v3", "value after conflicting cas")
    mc.gets(k("cas"))
    mc.delete(k("cas"))
    eq(mc.cas(k("cas"), b"v5"), False, "cas of a deleted key (NOT_FOUND)")
    eq(mc.get(k("cas")), None, "cas must not recreate a deleted key")
    # A new item under the same key must not accept the id of the one it replaced.
    other.set(k("cas"), b"v6")
    eq(mc.gets(k("cas")), b"v6", "gets")
    other.delete(k("cas"))
    other.set(k("cas"), b"again")
    eq(mc.cas(k("cas"), b"v7"), False, "cas with the id of a deleted, re-set item")
    eq(mc.get(k("cas")), b"again", "value after that cas")


@s.case
def incr_decr():
    mc.set(k("n"), b"10")
    eq(mc.incr(k("n"), 5), 15, "incr")
    eq(mc.decr(k("n"), 3), 12, "decr")
    eq(mc.decr(k("n"), 100), 0, "decr clamps at 0")
    eq(mc.incr(k("n")), 1, "incr by default delta 1")
    eq(mc.incr(k("n-missing"), 1), None, "incr of a missing key")
    eq(mc.decr(k("n-missing"), 1), None, "decr of a missing key")
    eq(mc.get(k("n-missing")), None, "incr must not create")
    mc.set(k("n64"), b"18446744073709551615")
    eq(mc.incr(k("n64"), 1), 0, "incr wraps at 2**64")
    eq(mc.set(k("int"), 41), True, "set of an int")
    eq(mc.incr(k("int")), 42, "incr of a value stored as an int")
    eq(mc.get(k("int")), 42, "int read back after incr")


@s.case
def delete():
    mc.set(k("d"), b"x")
    eq(mc.delete(k("d")), 1, "delete of an existing key")
    eq(mc.get(k("d")), None, "get after delete")
    eq(mc.delete(k("d")), 0, "delete of a missing key")
    mc.set_multi({k("dm1"): b"1", k("dm2"): b"2"})
    eq(mc.delete_multi([k("dm1"), k("dm2")]), 1, "delete_multi")
    eq(mc.get_multi([k("dm1"), k("dm2")]), {}, "get_multi after delete_multi")


@s.case
def touch():
    # memcached's clock ticks once a second, so a TTL of N lasts N-1..N s; memfleet may expire an
    # item up to a second earlier still (Segcache TTL buckets). TTL 3 leaves about a second for
    # the immediate checks; the deferred ones run 3.5 s later, when every short TTL is over.
    mc.set(k("t-extend"), b"x", time=3)
    mc.set(k("t-shorten"), b"y")
    eq(mc.touch(k("t-extend"), 3600), 1, "touch extending")
    eq(mc.touch(k("t-shorten"), 3), 1, "touch shortening")
    eq(mc.touch(k("t-missing"), 10), 0, "touch of a missing key")
    mc.set(k("ttl"), b"z", time=1)
    eq(mc.get(k("t-shorten")), b"y", "touched item still there")
    at = time.monotonic() + 3.5
    s.defer("touch_extended_survives", lambda: eq(mc.get(k("t-extend")), b"x", "extended item"), at)
    s.defer("touch_shortened_expires", lambda: eq(mc.get(k("t-shorten")), None, "shortened item"), at)
    s.defer("set_ttl_expires", lambda: eq(mc.get(k("ttl")), None, "item set with ttl 1"), at)


@s.case
def flags_types():
    # python-memcached encodes the Python type in the item flags (text, int, pickle, ...).
    values = {"int": 42, "neg": -7, "big": 2**70, "str": "héllo", "list": [1, "two", {"3": 3.0}],
              "bytes": b"\x00\x01", "tuple": (1, 2)}
    for name, v in values.items():
        eq(mc.set(k("ty-" + name), v), True, "set %s" % name)
    for name, v in values.items():
        got = mc.get(k("ty-" + name))
        eq((type(got), got), (type(v), v), "round trip of %s" % name)
    compressible = "z" * 100_000
    eq(mc.set(k("ty-zip"), compressible, min_compress_len=1), True, "set compressed")
    eq(mc.get(k("ty-zip")), compressible, "compressed value (flag bit 3) round trip")


@s.case
def large_values():
    for size in LARGE_SIZES:
        v = random_bytes(size, size)
        eq(mc.set(k("big%d" % size), v), True, "set %d bytes" % size)
        got = mc.get(k("big%d" % size))
        check(got == v, "get %d bytes: got %s" % (size, None if got is None else len(got)))


@s.case
def stats():
    st = mc.get_stats()
    eq(len(st), 1, "one server in stats")
    name, d = st[0]
    check("curr_items" in d and int(d["curr_items"]) >= 1, "stats curr_items: %r" % d.get("curr_items"))


sys.exit(0 if s.run() else 1)
