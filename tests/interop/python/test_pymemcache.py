"""pymemcache (text protocol) against a memcached-compatible server. Usage: HOST:PORT"""

import sys
import time

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError

from harness import LARGE_SIZES, TRICKY, Suite, check, eq, parse_addr, raises, random_bytes


class RawSerde:
    """Stores bytes as they are and hands back (value, flags), so flags are observable."""

    def serialize(self, key, value):
        return value, 0

    def deserialize(self, key, value, flags):
        return (value, flags)


addr = parse_addr(sys.argv)
# default_noreply=False: pymemcache otherwise sends `noreply` on every storage command and
# reports True whatever the server said, which would hide add/replace semantics.
mc = Client(addr, default_noreply=False, connect_timeout=3, timeout=3)
raw = Client(addr, default_noreply=False, connect_timeout=3, timeout=3, serde=RawSerde())
s = Suite("pymemcache")
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
    eq(mc.gets(k("never-set")), (None, None), "gets of a missing key")


@s.case
def multi_get():
    eq(mc.set_many({k("m1"): b"1", k("m2"): b"22", k("m3"): b"333"}), [], "set_many failures")
    got = mc.get_many([k("m1"), k("missing"), k("m2"), k("m3")])
    eq(got, {k("m1"): b"1", k("m2"): b"22", k("m3"): b"333"}, "get_many")
    got = mc.gets_many([k("m1"), k("m3"), k("missing")])
    eq(sorted(got), sorted([k("m1"), k("m3")]), "gets_many keys")
    eq(got[k("m1")][0], b"1", "gets_many value")
    check(got[k("m1")][1] != got[k("m3")][1], "distinct items have distinct cas")


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
    mc.set(k("cas"), b"v1")
    value, token = mc.gets(k("cas"))
    eq(value, b"v1", "gets value")
    check(token is not None, "gets returns a cas token")
    eq(mc.cas(k("cas"), b"v2", token), True, "cas with the current token")
    eq(mc.get(k("cas")), b"v2", "value after cas")
    eq(mc.cas(k("cas"), b"v3", token), False, "cas with a stale token (EXISTS)")
    eq(mc.get(k("cas")), b"v2", "value after conflicting cas")
    _, token2 = mc.gets(k("cas"))
    check(token2 != token, "cas token changes on update")
    mc.set(k("cas"), b"v4")
    eq(mc.cas(k("cas"), b"v5", token2), False, "cas after an intervening set")
    eq(mc.cas(k("cas-missing"), b"x", token2), None, "cas of a missing key (NOT_FOUND)")
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
    # memcached pads a shrunk counter with spaces ("0 "); clients parse it as a number.
    eq(mc.get(k("n")).rstrip(b" "), b"0", "value after decr")
    eq(mc.incr(k("n-missing"), 1), None, "incr of a missing key")
    eq(mc.decr(k("n-missing"), 1), None, "decr of a missing key")
    mc.set(k("n64"), b"18446744073709551615")
    eq(mc.incr(k("n64"), 1), 0, "incr wraps at 2**64")
    mc.set(k("nan"), b"abc")
    e = raises(lambda: mc.incr(k("nan"), 1), "incr of a non-numeric value")
    check(isinstance(e, MemcacheClientError), "CLIENT_ERROR expected, got %r" % e)


@s.case
def delete():
    mc.set(k("d"), b"x")
    eq(mc.delete(k("d")), True, "delete of an existing key")
    eq(mc.get(k("d")), None, "get after delete")
    eq(mc.delete(k("d")), False, "delete of a missing key")


@s.case
def touch():
    # memcached's clock ticks once a second, so a TTL of N lasts N-1..N s; memfleet may expire an
    # item up to a second earlier still (Segcache TTL buckets). TTL 3 leaves about a second for
    # the immediate checks; the deferred ones run 3.5 s later, when every short TTL is over.
    mc.set(k("t-extend"), b"x", expire=3)
    mc.set(k("t-shorten"), b"y")
    eq(mc.touch(k("t-extend"), 3600), True, "touch extending")
    eq(mc.touch(k("t-shorten"), 3), True, "touch shortening")
    eq(mc.touch(k("t-missing"), 10), False, "touch of a missing key")
    mc.set(k("ttl"), b"z", expire=1)
    eq(mc.get(k("t-shorten")), b"y", "touched item still there")
    at = time.monotonic() + 3.5
    s.defer("touch_extended_survives", lambda: eq(mc.get(k("t-extend")), b"x", "extended item"), at)
    s.defer("touch_shortened_expires", lambda: eq(mc.get(k("t-shorten")), None, "shortened item"), at)
    s.defer("set_ttl_expires", lambda: eq(mc.get(k("ttl")), None, "item set with ttl 1"), at)


@s.case
def flags():
    for i, f in enumerate((0, 1, 0x8000, 0xDEADBEEF, 0xFFFFFFFF)):
        eq(raw.set(k("f%d" % i), b"v", flags=f), True, "set with flags %d" % f)
        eq(raw.get(k("f%d" % i)), (b"v", f), "value and flags")
    got = raw.get_many([k("f3"), k("f4")])
    eq(got, {k("f3"): (b"v", 0xDEADBEEF), k("f4"): (b"v", 0xFFFFFFFF)}, "flags via get_many")


@s.case
def large_values():
    for size in LARGE_SIZES:
        v = random_bytes(size, size)
        eq(mc.set(k("big%d" % size), v), True, "set %d bytes" % size)
        got = mc.get(k("big%d" % size))
        check(got == v, "get %d bytes: got %s" % (size, None if got is None else len(got)))


@s.case
def too_large_rejected():
    # memcached's default item limit is 1 MiB: a 2 MiB value must be refused, not stored.
    e = raises(lambda: mc.set(k("huge"), b"h" * (2 * 1024 * 1024)), "set of a 2 MiB value")
    check(isinstance(e, MemcacheServerError), "SERVER_ERROR expected, got %r" % e)
    eq(mc.get(k("huge")), None, "oversized value must not be stored")
    eq(mc.set(k("after-huge"), b"ok"), True, "connection usable after oversized set")
    eq(mc.get(k("after-huge")), b"ok", "get after oversized set")


@s.case
def noreply():
    eq(mc.set(k("nr"), b"quiet", noreply=True), True, "set noreply")
    eq(mc.add(k("nr"), b"ignored", noreply=True), True, "add noreply")
    eq(mc.delete(k("nr-missing"), noreply=True), True, "delete noreply")
    eq(mc.get(k("nr")), b"quiet", "value written by noreply set, not by failed add")


@s.case
def stats_version():
    st = mc.stats()
    check(b"curr_items" in st or "curr_items" in st, "stats has curr_items: %r" % list(st)[:10])
    check(len(mc.version()) > 0, "version is not empty")


sys.exit(0 if s.run() else 1)
