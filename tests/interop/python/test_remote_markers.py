"""Remote markers (Facebook §5) from a Python application behind `memfleet router` (a pool with
remote_markers = true), with a plain text client (pymemcache): the admin keys
`__memfleet__.mark_remote(KEY,TTL)` and `__memfleet__.remote_marked(KEY)`. Usage: HOST:PORT

The flow a replica region's web server follows: mark the write (the marker's key comes back),
write to the master database invalidating the key and the marker, delete the key locally; a
miss then reads the master while the marker is there (the region's replica has not replayed
the write), the replica once the invalidation (here sent by hand, as the invalidator's delete)
removed it or its TTL passed."""

import sys
import time

from pymemcache.client.base import Client

from harness import Suite, check, eq, parse_addr

mc = Client(parse_addr(sys.argv), default_noreply=False, connect_timeout=3, timeout=3)
s = Suite("remote-markers")
k = s.key


def mark(key, ttl):
    return mc.get("__memfleet__.mark_remote(%s,%d)" % (key, ttl))


def marked(key):
    return mc.get("__memfleet__.remote_marked(%s)" % key)


@s.case
def a_marked_write_sends_misses_to_the_master_until_invalidated():
    key = k("user:42")
    eq(marked(key), b"0", "nothing marked yet: read the replica")
    marker = mark(key, 30)
    check(marker is not None and marker.startswith(b"remote-marker:" + key.encode() + b":"), "the marker's key: %r" % marker)
    eq(len(marker), len("remote-marker:") + len(key) + 17, "a 16-digit token")
    mc.delete(key)
    eq(marked(key), b"1", "a miss now reads the master")
    # The invalidation of the write's transaction, delivered when the replica has it.
    eq(mc.delete(marker.decode()), True, "the invalidator's delete of the marker")
    eq(marked(key), b"0", "replayed: read the replica again")


@s.case
def each_write_has_its_own_marker():
    key = k("user:7")
    first = mark(key, 30)
    second = mark(key, 30)
    check(first != second, "two writes, two markers")
    mc.delete(first.decode())
    eq(marked(key), b"1", "the first write's invalidation leaves the second marked")
    mc.delete(second.decode())
    eq(marked(key), b"0", "both replayed")


@s.case
def a_lost_invalidation_expires_with_the_ttl():
    key = k("user:9")
    mark(key, 1)
    eq(marked(key), b"1", "marked")
    time.sleep(2.1)
    eq(marked(key), b"0", "the marker's TTL passed")


@s.case
def bad_admin_keys_are_refused():
    for bad in ("__memfleet__.mark_remote(%s)" % k("x"), "__memfleet__.mark_remote(%s,0)" % k("x"),
                "__memfleet__.mark_remote(%s,abc)" % k("x")):
        try:
            mc.get(bad)
        except Exception as e:  # noqa: BLE001 - pymemcache raises on CLIENT_ERROR
            check("bad command line format" in str(e), "%s: %s" % (bad, e))
        else:
            check(False, "%s was accepted" % bad)


sys.exit(0 if s.run() else 1)
