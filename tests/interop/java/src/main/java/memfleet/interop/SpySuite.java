package memfleet.interop;

import static memfleet.interop.Suite.LARGE_SIZES;
import static memfleet.interop.Suite.TRICKY;
import static memfleet.interop.Suite.bytes;
import static memfleet.interop.Suite.check;
import static memfleet.interop.Suite.eq;
import static memfleet.interop.Suite.randomBytes;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.CachedData;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.transcoders.Transcoder;

/** spymemcached (net.spy:spymemcached), text or binary connection factory. */
final class SpySuite {
    /** Stores bytes as they are, with explicit flags, so flags are observable. */
    static final class Raw implements Transcoder<Flagged> {
        @Override
        public boolean asyncDecode(CachedData d) {
            return false;
        }

        @Override
        public CachedData encode(Flagged f) {
            return new CachedData(f.flags(), f.data(), getMaxSize());
        }

        @Override
        public Flagged decode(CachedData d) {
            return new Flagged(d.getData(), d.getFlags());
        }

        @Override
        public int getMaxSize() {
            // Larger than any server limit: the server, not the client, must refuse big values.
            return 20 * 1024 * 1024;
        }
    }

    private SpySuite() {}

    static boolean run(String addr, boolean binary) throws Exception {
        ConnectionFactoryBuilder b = new ConnectionFactoryBuilder()
                .setProtocol(binary ? ConnectionFactoryBuilder.Protocol.BINARY
                        : ConnectionFactoryBuilder.Protocol.TEXT)
                .setOpTimeout(3_000)
                // Cancel: fail operations at once when the connection is down instead of queueing
                // them for a reconnect, so a broken server shows up as failures, not a hang.
                .setFailureMode(FailureMode.Cancel)
                .setDaemon(true);
        MemcachedClient mc = new MemcachedClient(b.build(), AddrUtil.getAddresses(addr));
        Raw raw = new Raw();
        Suite s = new Suite(binary ? "spymemcached-binary" : "spymemcached-text");
        try {
            body(s, mc, raw, binary);
            return s.finish();
        } finally {
            mc.shutdown();
        }
    }

    private static Flagged f(String v) {
        return new Flagged(bytes(v), 0);
    }

    private static void body(Suite s, MemcachedClient mc, Raw raw, boolean binary) {
        s.run("set_get", () -> {
            eq(mc.set(s.k("a"), 0, f("hello"), raw).get(), true, "set");
            eq(mc.get(s.k("a"), raw), f("hello"), "get");
            eq(mc.set(s.k("a"), 0, new Flagged(TRICKY, 0), raw).get(), true, "overwrite");
            eq(mc.get(s.k("a"), raw), new Flagged(TRICKY, 0), "get value with protocol bytes inside");
            eq(mc.set(s.k("empty"), 0, f(""), raw).get(), true, "set empty");
            eq(mc.get(s.k("empty"), raw), f(""), "get empty value");
            String longKey = (s.k("L") + "x".repeat(250)).substring(0, 250);
            eq(mc.set(longKey, 0, f("250"), raw).get(), true, "set 250-byte key");
            eq(mc.get(longKey, raw), f("250"), "get 250-byte key");
        });

        s.run("miss", () -> {
            eq(mc.get(s.k("never-set")), null, "get of a missing key");
            eq(mc.gets(s.k("never-set")), null, "gets of a missing key");
        });

        s.run("multi_get", () -> {
            mc.set(s.k("m1"), 0, f("1"), raw).get();
            mc.set(s.k("m2"), 0, f("22"), raw).get();
            mc.set(s.k("m3"), 0, f("333"), raw).get();
            Map<String, Flagged> got = mc.getBulk(List.of(s.k("m1"), s.k("missing"), s.k("m2"), s.k("m3")), raw);
            eq(got, Map.of(s.k("m1"), f("1"), s.k("m2"), f("22"), s.k("m3"), f("333")), "getBulk");
            eq(mc.getBulk(List.of(s.k("missing1"), s.k("missing2")), raw), Map.of(), "getBulk of only misses");
        });

        s.run("add_replace", () -> {
            eq(mc.add(s.k("ar"), 0, f("first"), raw).get(), true, "add of a new key");
            eq(mc.add(s.k("ar"), 0, f("second"), raw).get(), false, "add of an existing key");
            eq(mc.get(s.k("ar"), raw), f("first"), "value after failed add");
            eq(mc.replace(s.k("ar"), 0, f("third"), raw).get(), true, "replace of an existing key");
            eq(mc.get(s.k("ar"), raw), f("third"), "value after replace");
            eq(mc.replace(s.k("ar-missing"), 0, f("x"), raw).get(), false, "replace of a missing key");
            eq(mc.get(s.k("ar-missing"), raw), null, "replace must not create");
        });

        s.run("append_prepend", () -> {
            mc.set(s.k("ap"), 0, f("mid"), raw).get();
            eq(mc.append(s.k("ap"), f("-end"), raw).get(), true, "append");
            eq(mc.prepend(s.k("ap"), f("start-"), raw).get(), true, "prepend");
            eq(mc.get(s.k("ap"), raw), f("start-mid-end"), "after append+prepend");
            eq(mc.append(s.k("ap-missing"), f("x"), raw).get(), false, "append to a missing key");
        });

        s.run("cas", () -> {
            mc.set(s.k("cas"), 0, f("v1"), raw).get();
            CASValue<Flagged> cv = mc.gets(s.k("cas"), raw);
            check(cv != null, "gets returned nothing");
            eq(cv.getValue(), f("v1"), "gets value");
            eq(mc.cas(s.k("cas"), cv.getCas(), f("v2"), raw), CASResponse.OK, "cas with the current id");
            eq(mc.get(s.k("cas"), raw), f("v2"), "value after cas");
            eq(mc.cas(s.k("cas"), cv.getCas(), f("v3"), raw), CASResponse.EXISTS, "cas with a stale id");
            eq(mc.get(s.k("cas"), raw), f("v2"), "value after conflicting cas");
            CASValue<Flagged> cv2 = mc.gets(s.k("cas"), raw);
            check(cv2.getCas() != cv.getCas(), "cas id did not change on update");
            mc.delete(s.k("cas")).get();
            eq(mc.cas(s.k("cas"), cv2.getCas(), f("v4"), raw), CASResponse.NOT_FOUND, "cas of a deleted key");
            eq(mc.get(s.k("cas"), raw), null, "cas must not recreate a deleted key");
            // A new item under the same key must not accept the id of the one it replaced.
            mc.set(s.k("cas"), 0, f("v5"), raw).get();
            long old = mc.gets(s.k("cas"), raw).getCas();
            mc.delete(s.k("cas")).get();
            mc.set(s.k("cas"), 0, f("again"), raw).get();
            eq(mc.cas(s.k("cas"), old, f("v6"), raw), CASResponse.EXISTS, "cas with the id of a deleted, re-set item");
            eq(mc.get(s.k("cas"), raw), f("again"), "value after that cas");
        });

        s.run("incr_decr", () -> {
            mc.set(s.k("n"), 0, "10").get();
            eq(mc.incr(s.k("n"), 5), 15L, "incr");
            eq(mc.decr(s.k("n"), 3), 12L, "decr");
            eq(mc.decr(s.k("n"), 100), 0L, "decr clamps at 0");
            eq(mc.incr(s.k("n-missing"), 1), -1L, "incr of a missing key (-1 = not found)");
            eq(mc.decr(s.k("n-missing"), 1), -1L, "decr of a missing key (-1 = not found)");
            eq(mc.get(s.k("n-missing")), null, "incr must not create");
            // With a default, a missing counter is created (binary: by the server; text: add).
            eq(mc.incr(s.k("n-dflt"), 1, 7), 7L, "incr with default of a missing key");
            eq(mc.incr(s.k("n-dflt"), 1, 7), 8L, "incr with default of an existing key");
            eq(mc.get(s.k("n-dflt")), "8", "counter read back as a string");
            mc.set(s.k("n64"), 0, "18446744073709551615").get();
            eq(mc.incr(s.k("n64"), 1), 0L, "incr wraps at 2**64");
        });

        s.run("delete", () -> {
            mc.set(s.k("d"), 0, f("x"), raw).get();
            eq(mc.delete(s.k("d")).get(), true, "delete of an existing key");
            eq(mc.get(s.k("d"), raw), null, "get after delete");
            eq(mc.delete(s.k("d")).get(), false, "delete of a missing key");
        });

        s.run("touch", () -> {
            // memcached's clock ticks once a second, so a TTL of N lasts N-1..N s; memfleet may expire
            // an item up to a second earlier still (Segcache TTL buckets). TTL 3 leaves about a
            // second for the immediate checks; the deferred ones run 3.5 s later.
            mc.set(s.k("t-extend"), 3, f("x"), raw).get();
            mc.set(s.k("t-shorten"), 0, f("y"), raw).get();
            eq(mc.touch(s.k("t-extend"), 3600).get(), true, "touch extending");
            eq(mc.touch(s.k("t-shorten"), 3).get(), true, "touch shortening");
            eq(mc.touch(s.k("t-missing"), 10).get(), false, "touch of a missing key");
            mc.set(s.k("ttl"), 1, f("z"), raw).get();
            eq(mc.get(s.k("t-shorten"), raw), f("y"), "touched item still there");
            s.defer("touch_extended_survives", 3500, () -> eq(mc.get(s.k("t-extend"), raw), f("x"), "extended item"));
            s.defer("touch_shortened_expires", 3500, () -> eq(mc.get(s.k("t-shorten"), raw), null, "shortened item"));
            s.defer("set_ttl_expires", 3500, () -> eq(mc.get(s.k("ttl"), raw), null, "item set with ttl 1"));
        });

        if (binary) {
            // spymemcached implements get-and-touch for the binary protocol only.
            s.run("get_and_touch", () -> {
                mc.set(s.k("gat"), 0, new Flagged(bytes("g"), 77), raw).get();
                CASValue<Flagged> cv = mc.getAndTouch(s.k("gat"), 3, raw);
                check(cv != null, "gat of an existing key returned nothing");
                eq(cv.getValue(), new Flagged(bytes("g"), 77), "gat value and flags");
                eq(mc.getAndTouch(s.k("gat-missing"), 2, raw), null, "gat of a missing key");
                s.defer("gat_shortened_expires", 3500, () -> eq(mc.get(s.k("gat"), raw), null, "item gat with ttl 3"));
            });
        }

        s.run("flags", () -> {
            // Flags are unsigned 32-bit; the text command factories format Java's signed int, so
            // flags of 2**31 and above are sent as negative numbers (which servers refuse):
            // binary protocol only.
            int[] flags = binary ? new int[] {0, 1, 0x8000, 0x7FFFFFFF, 0xDEADBEEF, 0xFFFFFFFF}
                    : new int[] {0, 1, 0x8000, 0x7FFFFFFE, 0x7FFFFFFF, 0x12345678};
            for (int i = 0; i < flags.length; i++) {
                Flagged v = new Flagged(bytes("v" + i), flags[i]);
                eq(mc.set(s.k("f" + i), 0, v, raw).get(), true, "set with flags " + Integer.toUnsignedString(flags[i]));
                eq(mc.get(s.k("f" + i), raw), v, "value and flags");
            }
            Map<String, Flagged> got = mc.getBulk(List.of(s.k("f4"), s.k("f5")), raw);
            eq(got.get(s.k("f4")), new Flagged(bytes("v4"), flags[4]), "flags via getBulk");
            eq(got.get(s.k("f5")), new Flagged(bytes("v5"), flags[5]), "flags via getBulk");
        });

        s.run("types", () -> {
            // The default transcoder encodes the Java type (and gzip compression above 16 KiB)
            // in the flags: a server that mangles flags returns the wrong type or garbage.
            Map<String, Object> values = new HashMap<>();
            values.put("string", "héllo");
            values.put("int", 42);
            values.put("long", 1L << 40);
            values.put("bool", true);
            values.put("bytes", new byte[] {0, 1, 2});
            values.put("map", new HashMap<>(Map.of("a", 1, "b", List.of("x", "y"))));
            values.put("zipped", "z".repeat(100_000));
            for (var e : values.entrySet()) {
                eq(mc.set(s.k("ty-" + e.getKey()), 0, e.getValue()).get(), true, "set " + e.getKey());
            }
            for (var e : values.entrySet()) {
                eq(mc.get(s.k("ty-" + e.getKey())), e.getValue(), "round trip of " + e.getKey());
            }
        });

        s.run("large_values", () -> {
            for (int size : LARGE_SIZES) {
                Flagged v = new Flagged(randomBytes(size, size), 3);
                eq(mc.set(s.k("big" + size), 0, v, raw).get(), true, "set " + size + " bytes");
                eq(mc.get(s.k("big" + size), raw), v, "get " + size + " bytes");
            }
        });

        s.run("too_large_rejected", () -> {
            Boolean stored;
            try {
                stored = mc.set(s.k("huge"), 0, new Flagged(new byte[2 * 1024 * 1024], 0), raw).get();
            } catch (java.util.concurrent.ExecutionException e) {
                stored = false;
            }
            eq(stored, false, "set of a 2 MiB value");
            // On SERVER_ERROR the text protocol client drops the connection and reconnects in the
            // background; with FailureMode.Cancel operations fail until it is back.
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (true) {
                try {
                    mc.get(s.k("probe"), raw);
                    break;
                } catch (RuntimeException e) {
                    if (System.nanoTime() > deadline) {
                        throw e;
                    }
                    Thread.sleep(50);
                }
            }
            eq(mc.get(s.k("huge"), raw), null, "oversized value must not be stored");
            eq(mc.set(s.k("after-huge"), 0, f("ok"), raw).get(), true, "set after oversized set");
            eq(mc.get(s.k("after-huge"), raw), f("ok"), "get after oversized set");
        });

        s.run("stats_version", () -> {
            var stats = mc.getStats();
            eq(stats.size(), 1, "one server in stats");
            Map<String, String> st = stats.values().iterator().next();
            check(st.containsKey("curr_items") && Long.parseLong(st.get("curr_items")) >= 1,
                    "stats curr_items: " + st.get("curr_items"));
            String version = mc.getVersions().values().iterator().next();
            check(version != null && !version.isEmpty(), "version: " + version);
        });
    }
}
