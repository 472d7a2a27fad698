"""Flash hits through real clients: pymemcache (text) and pylibmc (libmemcached, binary protocol)
store far more than the server's RAM, then read every key back, most of them from flash
(memfleet --flash, memcached -o ext_path). Usage: HOST:PORT [--binary]

The server must have a flash tier with little RAM (scripts/test runs this suite against
`memfleet server -m 8 --flash FILE:64m`). Against a server without one (no `extstore_*` in
`stats`), the suite says so and passes, unless MEMFLEET_INTEROP_REQUIRE_FLASH=1.
"""

import os
import sys

import pylibmc
from pymemcache.client.base import Client

from harness import Suite, check, eq, random_bytes

binary = "--binary" in sys.argv[1:]
argv = [a for a in sys.argv if a != "--binary"]
if len(argv) != 2 or ":" not in argv[1]:
    sys.exit("usage: %s HOST:PORT [--binary]" % sys.argv[0])
host, port = argv[1].rsplit(":", 1)
name = "pylibmc-flash" if binary else "pymemcache-flash"

# Enough to push most items out of an 8 MiB RAM onto flash.
KEYS = 24_000
SIZE = 1000

stats_client = Client((host, int(port)), default_noreply=False, connect_timeout=3, timeout=10)


def stats():
    return {
        (k.decode() if isinstance(k, bytes) else k): v for k, v in stats_client.stats().items()
    }


if "extstore_objects_written" not in stats():
    if os.environ.get("MEMFLEET_INTEROP_REQUIRE_FLASH") == "1":
        print("  FAIL %s/flash: the server has no flash tier (no extstore_* in stats)" % name)
        print("%s: 0 passed, 1 failed (0.0s)" % name, flush=True)
        sys.exit(1)
    print("  ok   %s/skipped: the server has no flash tier" % name)
    print("%s: 1 passed, 0 failed (0.0s)" % name, flush=True)
    sys.exit(0)

s = Suite(name)
k = s.key


def value(i):
    return random_bytes(SIZE, "%s%d" % (s.prefix, i))


if binary:
    mc = pylibmc.Client(["%s:%s" % (host, port)], binary=True, behaviors={"tcp_nodelay": True})

    def set_many(items):
        failed = mc.set_multi(items)
        eq(failed, [], "set_multi")

    def get_many(keys):
        return mc.get_multi(keys)

else:
    mc = Client((host, int(port)), default_noreply=False, connect_timeout=3, timeout=10)

    def set_many(items):
        eq(mc.set_many(items), [], "set_many")

    def get_many(keys):
        return mc.get_many(keys)


@s.case
def most_reads_come_from_flash_byte_for_byte():
    for start in range(0, KEYS, 500):
        set_many({k(str(i)): value(i) for i in range(start, min(start + 500, KEYS))})
    before = stats()
    written = int(before["extstore_objects_written"])
    check(written > KEYS // 2, "items went to flash: extstore_objects_written %d" % written)
    found = 0
    for start in range(0, KEYS, 100):
        keys = [k(str(i)) for i in range(start, min(start + 100, KEYS))]
        got = get_many(keys)
        for key, v in got.items():
            key = key.decode() if isinstance(key, bytes) else key
            i = int(key[len(s.prefix):])
            eq(v, value(i), "value of %s" % key)
        found += len(got)
    after = stats()
    hits = int(after["get_extstore"]) - int(before["get_extstore"])
    check(found > KEYS * 95 // 100, "%d of %d keys found" % (found, KEYS))
    check(hits > KEYS // 2, "flash hits: get_extstore grew by %d" % hits)
    eq(int(after["badcrc_from_extstore"]), 0, "badcrc_from_extstore")


@s.case
def a_flash_item_can_be_updated_and_deleted():
    first = k("0")
    eq(get_many([first]).get(first), value(0), "the first key written (read from flash before)")
    mc.set(first, b"new")
    eq(get_many([first])[first], b"new", "overwritten")
    mc.delete(first)
    eq(get_many([first]), {}, "deleted")


sys.exit(0 if s.run() else 1)
