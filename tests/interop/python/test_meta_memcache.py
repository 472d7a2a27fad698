"""meta-memcache (RevenueCat's lease-aware meta-protocol client) against a memcached-compatible
server. Usage: HOST:PORT

The same checks pass against memcached 1.6.45 (`scripts/test` runs this suite against both):
each one states memcached's behaviour, so a difference from memcached is a FAIL here.

MEMFLEET_INTEROP_CAS_ABOVE=N (a server started with `--test-cas-start N`) turns the CAS checks
into the regression guard for issue 39: meta-memcache reads a CAS unique as 32 bits, so past
2^32 it loses the token and a `set` with a stale one stores unconditionally. The suite then
checks that this is what happens (why memfleet's uniques must stay small, as memcached's).
"""

import os
import sys
import threading
import time

from meta_memcache import (
    CacheClient,
    LeasePolicy,
    RecachePolicy,
    ServerAddress,
    StalePolicy,
    connection_pool_factory_builder,
)

from harness import Suite, check, eq, parse_addr

host, port = parse_addr(sys.argv)
cas_above = int(os.environ.get("MEMFLEET_INTEROP_CAS_ABOVE", "0"))


def client():
    return CacheClient.cache_client_from_servers(
        servers=[ServerAddress(host=host, port=port)],
        connection_pool_factory_fn=connection_pool_factory_builder(),
    )


mc = client()
s = Suite("meta-memcache" if not cas_above else "meta-memcache-cas-%d" % cas_above)
k = s.key


@s.case
def set_get_multi_get():
    eq(mc.set(k("a"), "alpha", ttl=60), True, "set")
    eq(mc.set(k("b"), {"n": 1}, ttl=60), True, "set of a pickled value")
    eq(mc.get(k("a")), "alpha", "get")
    got = mc.multi_get([k("a"), k("b"), k("missing")])
    eq({key.key: v for key, v in got.items()}, {k("a"): "alpha", k("b"): {"n": 1}, k("missing"): None}, "multi_get")


@s.case
def cas_round_trip():
    mc.set(k("cas"), "v1", ttl=60)
    value, token = mc.get_cas(k("cas"))
    eq(value, "v1", "get_cas value")
    if cas_above > (1 << 32) - 1:
        # The regression: the client keeps 32 bits of the unique and drops it.
        eq(token, None, "get_cas past 2^32 (meta-memcache reads 32 bits)")
        eq(mc.set(k("cas"), "v2", ttl=60, cas_token=token), True, "set without a token")
        eq(mc.set(k("cas"), "v3", ttl=60, cas_token=token), True, "a lost update the client cannot see")
        return
    check(isinstance(token, int) and 0 < token < 1 << 32, "a CAS unique a 32-bit reader holds: %r" % token)
    if cas_above:
        check(token > cas_above, "unique %r above the server's start %d" % (token, cas_above))
    eq(mc.set(k("cas"), "v2", ttl=60, cas_token=token), True, "set_cas with the current token")
    eq(mc.set(k("cas"), "v3", ttl=60, cas_token=token), False, "set_cas with a stale token is refused")
    eq(mc.get(k("cas")), "v2", "the stale set changed nothing")
    value, token2 = mc.get_cas(k("cas"))
    check(token2 is not None and token2 != token, "a write changes the unique: %r, %r" % (token, token2))


@s.case
def lease_winner_refills_with_its_token():
    value, token = mc.get_or_lease_cas(k("lease"), LeasePolicy(ttl=30))
    eq(value, None, "a miss wins the lease")
    if cas_above > (1 << 32) - 1:
        eq(token, None, "the lease token past 2^32 is lost too (32 bits)")
        return
    check(isinstance(token, int) and 0 < token < 1 << 32, "the winner holds a token: %r" % (token,))
    eq(mc.set(k("lease"), "filled", ttl=60, cas_token=token), True, "the winner's set with its token")
    eq(mc.get(k("lease")), "filled", "filled")


@s.case
def lease_stampede_has_one_winner():
    key = k("herd")
    results = []
    lock = threading.Lock()
    policy = LeasePolicy(ttl=30, miss_retries=20, miss_retry_wait=0.1, wait_backoff_factor=1.0, miss_max_retry_wait=0.1)

    def reader():
        c = client()
        value = c.get_or_lease(key, policy)
        if value is None:
            # Won: the database read, then the fill.
            time.sleep(0.3)
            c.set(key, "from-db", ttl=60)
            value = "won"
        with lock:
            results.append(value)

    threads = [threading.Thread(target=reader) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    eq(sorted(results), ["from-db"] * 5 + ["won"], "one winner fills, the others wait and read its value")


@s.case
def stale_after_delete_and_recache():
    key = k("stale")
    mc.set(key, "old", ttl=60)
    eq(mc.delete(key, stale_policy=StalePolicy(mark_stale_on_deletion_ttl=30)), True, "delete marking stale")
    # The one reader who wins the right to refresh it is told to (meta-memcache hands a
    # winner no value, stale or not) and holds the token; memcached 1.6.45 does the same.
    value, token = mc.get_or_lease_cas(key, LeasePolicy(ttl=30))
    eq(value, None, "the refresher is told to refill")
    if cas_above > (1 << 32) - 1:
        eq(token, None, "the refresher's token past 2^32 is lost (32 bits)")
        return
    check(token is not None, "the refresher's token")
    eq(mc.set(key, "new", ttl=60, cas_token=token), True, "refresh with the token")
    eq(mc.get(key), "new", "fresh again")
    # Recache: a value closer to expiry than 30 s wins one reader a refresh (R flag: told to
    # refill, no value), and the next reader, while the refresh is out, reads the value.
    mc.set(k("recache"), "soon", ttl=5)
    eq(mc.get(k("recache"), recache_policy=RecachePolicy(ttl=30)), None, "the recache winner")
    eq(mc.get(k("recache"), recache_policy=RecachePolicy(ttl=30)), "soon", "the others read it")


@s.case
def refill_delta_and_touch():
    eq(mc.refill(k("refill"), "first", ttl=60), True, "refill (add) of a missing key")
    eq(mc.refill(k("refill"), "second", ttl=60), False, "refill does not overwrite")
    eq(mc.get(k("refill")), "first", "first fill kept")
    eq(mc.delta_initialize_and_get(k("counter"), delta=1, initial_value=10, initial_ttl=60), 10, "initialized")
    eq(mc.delta_initialize_and_get(k("counter"), delta=5, initial_value=10, initial_ttl=60), 15, "incremented")
    eq(mc.touch(k("refill"), ttl=120), True, "touch")
    eq(mc.touch(k("never"), ttl=120), False, "touch of a missing key")


sys.exit(0 if s.run() else 1)
