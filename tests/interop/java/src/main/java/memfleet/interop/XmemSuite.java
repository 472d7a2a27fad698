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
import net.rubyeye.xmemcached.GetsResponse;
import net.rubyeye.xmemcached.MemcachedClient;
import net.rubyeye.xmemcached.XMemcachedClientBuilder;
import net.rubyeye.xmemcached.command.BinaryCommandFactory;
import net.rubyeye.xmemcached.transcoders.CachedData;
import net.rubyeye.xmemcached.transcoders.CompressionMode;
import net.rubyeye.xmemcached.transcoders.Transcoder;
import net.rubyeye.xmemcached.utils.AddrUtil;

/** xmemcached (com.googlecode.xmemcached:xmemcached), text or binary command factory. */
final class XmemSuite {
    /** Stores bytes as they are, with explicit flags; no client-side size limit or compression. */
    static final class Raw implements Transcoder<Flagged> {
        @Override
        public CachedData encode(Flagged f) {
            // The 4-argument constructor takes the size limit (the 2-argument one enforces 1 MiB):
            // the server, not the client, must refuse big values.
            return new CachedData(f.flags(), f.data(), 20 * 1024 * 1024, -1);
        }

        @Override
        public Flagged decode(CachedData d) {
            return new Flagged(d.getData(), d.getFlag());
        }

        @Override
        public void setPrimitiveAsString(boolean b) {}

        @Override
        public void setPackZeros(boolean b) {}

        @Override
        public void setCompressionThreshold(int t) {}

        @Override
        public boolean isPrimitiveAsString() {
            return false;
        }

        @Override
        public boolean isPackZeros() {
            return false;
        }

        @Override
        public void setCompressionMode(CompressionMode m) {}
    }

    private XmemSuite() {}

    static boolean run(String addr, boolean binary) throws Exception {
        XMemcachedClientBuilder b = new XMemcachedClientBuilder(AddrUtil.getAddresses(addr));
        if (binary) {
            b.setCommandFactory(new BinaryCommandFactory());
        }
        b.setOpTimeout(3_000);
        b.setConnectTimeout(3_000);
        b.setConnectionPoolSize(1);
        MemcachedClient mc = b.build();
        Suite s = new Suite(binary ? "xmemcached-binary" : "xmemcached-text");
        try {
            body(s, mc, new Raw(), binary);
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
            eq(mc.set(s.k("a"), 0, f("hello"), raw), true, "set");
            eq(mc.get(s.k("a"), raw), f("hello"), "get");
            eq(mc.set(s.k("a"), 0, new Flagged(TRICKY, 0), raw), true, "overwrite");
            eq(mc.get(s.k("a"), raw), new Flagged(TRICKY, 0), "get value with protocol bytes inside");
            eq(mc.set(s.k("empty"), 0, f(""), raw), true, "set empty");
            eq(mc.get(s.k("empty"), raw), f(""), "get empty value");
            String longKey = (s.k("L") + "x".repeat(250)).substring(0, 250);
            eq(mc.set(longKey, 0, f("250"), raw), true, "set 250-byte key");
            eq(mc.get(longKey, raw), f("250"), "get 250-byte key");
        });

        s.run("miss", () -> {
            eq(mc.get(s.k("never-set")), null, "get of a missing key");
            eq(mc.gets(s.k("never-set")), null, "gets of a missing key");
        });

        s.run("multi_get", () -> {
            mc.set(s.k("m1"), 0, f("1"), raw);
            mc.set(s.k("m2"), 0, f("22"), raw);
            mc.set(s.k("m3"), 0, f("333"), raw);
            Map<String, Flagged> got = mc.get(List.of(s.k("m1"), s.k("missing"), s.k("m2"), s.k("m3")), raw);
            eq(got, Map.of(s.k("m1"), f("1"), s.k("m2"), f("22"), s.k("m3"), f("333")), "multi get");
            Map<String, GetsResponse<Flagged>> gets = mc.gets(List.of(s.k("m1"), s.k("m2"), s.k("missing")), raw);
            eq(gets.keySet(), java.util.Set.of(s.k("m1"), s.k("m2")), "multi gets keys");
            check(gets.get(s.k("m1")).getCas() != gets.get(s.k("m2")).getCas(), "distinct items have distinct cas");
        });

        s.run("add_replace", () -> {
            eq(mc.add(s.k("ar"), 0, f("first"), raw), true, "add of a new key");
            eq(mc.add(s.k("ar"), 0, f("second"), raw), false, "add of an existing key");
            eq(mc.get(s.k("ar"), raw), f("first"), "value after failed add");
            eq(mc.replace(s.k("ar"), 0, f("third"), raw), true, "replace of an existing key");
            eq(mc.get(s.k("ar"), raw), f("third"), "value after replace");
            eq(mc.replace(s.k("ar-missing"), 0, f("x"), raw), false, "replace of a missing key");
            eq(mc.get(s.k("ar-missing"), raw), null, "replace must not create");
        });

        s.run("append_prepend", () -> {
            mc.set(s.k("ap"), 0, "mid");
            eq(mc.append(s.k("ap"), "-end"), true, "append");
            eq(mc.prepend(s.k("ap"), "start-"), true, "prepend");
            eq(mc.get(s.k("ap")), "start-mid-end", "after append+prepend");
            eq(mc.append(s.k("ap-missing"), "x"), false, "append to a missing key");
        });

        s.run("cas", () -> {
            mc.set(s.k("cas"), 0, f("v1"), raw);
            GetsResponse<Flagged> r = mc.gets(s.k("cas"), raw);
            check(r != null, "gets returned nothing");
            eq(r.getValue(), f("v1"), "gets value");
            eq(mc.cas(s.k("cas"), 0, f("v2"), raw, r.getCas()), true, "cas with the current id");
            eq(mc.get(s.k("cas"), raw), f("v2"), "value after cas");
            eq(mc.cas(s.k("cas"), 0, f("v3"), raw, r.getCas()), false, "cas with a stale id");
            eq(mc.get(s.k("cas"), raw), f("v2"), "value after conflicting cas");
            GetsResponse<Flagged> r2 = mc.gets(s.k("cas"), raw);
            check(r2.getCas() != r.getCas(), "cas id did not change on update");
            mc.delete(s.k("cas"));
            eq(mc.cas(s.k("cas"), 0, f("v4"), raw, r2.getCas()), false, "cas of a deleted key");
            eq(mc.get(s.k("cas"), raw), null, "cas must not recreate a deleted key");
            // A new item under the same key must not accept the id of the one it replaced.
            mc.set(s.k("cas"), 0, f("v5"), raw);
            long old = mc.gets(s.k("cas"), raw).getCas();
            mc.delete(s.k("cas"));
            mc.set(s.k("cas"), 0, f("again"), raw);
            eq(mc.cas(s.k("cas"), 0, f("v6"), raw, old), false, "cas with the id of a deleted, re-set item");
            eq(mc.get(s.k("cas"), raw), f("again"), "value after that cas");
        });

        s.run("incr_decr", () -> {
            mc.set(s.k("n"), 0, "10");
            eq(mc.incr(s.k("n"), 5), 15L, "incr");
            eq(mc.decr(s.k("n"), 3), 12L, "decr");
            eq(mc.decr(s.k("n"), 100), 0L, "decr clamps at 0");
            // xmemcached creates a missing counter with the initial value (default 0): binary by
            // the server's incr-with-initial, text by an add after NOT_FOUND.
            eq(mc.incr(s.k("n-new"), 1, 7), 7L, "incr of a missing key with initial 7");
            eq(mc.incr(s.k("n-new"), 1, 7), 8L, "incr of the created counter");
            eq(mc.decr(s.k("n-new2"), 1, 9), 9L, "decr of a missing key with initial 9");
            Object counter = mc.get(s.k("n-new"));
            eq(counter, "8", "counter read back");
            mc.set(s.k("n64"), 0, "18446744073709551615");
            eq(mc.incr(s.k("n64"), 1), 0L, "incr wraps at 2**64");
        });

        s.run("delete", () -> {
            mc.set(s.k("d"), 0, f("x"), raw);
            eq(mc.delete(s.k("d")), true, "delete of an existing key");
            eq(mc.get(s.k("d"), raw), null, "get after delete");
            eq(mc.delete(s.k("d")), false, "delete of a missing key");
        });

        s.run("touch", () -> {
            // memcached's clock ticks once a second, so a TTL of N lasts N-1..N s; memfleet may expire
            // an item up to a second earlier still (Segcache TTL buckets). TTL 3 leaves about a
            // second for the immediate checks; the deferred ones run 3.5 s later.
            mc.set(s.k("t-extend"), 3, f("x"), raw);
            mc.set(s.k("t-shorten"), 0, f("y"), raw);
            eq(mc.touch(s.k("t-extend"), 3600), true, "touch extending");
            eq(mc.touch(s.k("t-shorten"), 3), true, "touch shortening");
            eq(mc.touch(s.k("t-missing"), 10), false, "touch of a missing key");
            mc.set(s.k("ttl"), 1, f("z"), raw);
            eq(mc.get(s.k("t-shorten"), raw), f("y"), "touched item still there");
            s.defer("touch_extended_survives", 3500, () -> eq(mc.get(s.k("t-extend"), raw), f("x"), "extended item"));
            s.defer("touch_shortened_expires", 3500, () -> eq(mc.get(s.k("t-shorten"), raw), null, "shortened item"));
            s.defer("set_ttl_expires", 3500, () -> eq(mc.get(s.k("ttl"), raw), null, "item set with ttl 1"));
        });

        if (binary) {
            // xmemcached implements get-and-touch for the binary protocol only.
            s.run("get_and_touch", () -> {
                mc.set(s.k("gat"), 0, "g");
                eq(mc.getAndTouch(s.k("gat"), 3), "g", "gat value");
                eq(mc.getAndTouch(s.k("gat-missing"), 2), null, "gat of a missing key");
                s.defer("gat_shortened_expires", 3500, () -> eq(mc.get(s.k("gat")), null, "item gat with ttl 3"));
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
                eq(mc.set(s.k("f" + i), 0, v, raw), true, "set with flags " + Integer.toUnsignedString(flags[i]));
                eq(mc.get(s.k("f" + i), raw), v, "value and flags");
            }
            Map<String, Flagged> got = mc.get(List.of(s.k("f4"), s.k("f5")), raw);
            eq(got.get(s.k("f4")), new Flagged(bytes("v4"), flags[4]), "flags via multi get");
            eq(got.get(s.k("f5")), new Flagged(bytes("v5"), flags[5]), "flags via multi get");
        });

        s.run("types", () -> {
            // The default transcoder encodes the Java type (and compression above 16 KiB) in the
            // flags: a server that mangles flags returns the wrong type or garbage.
            Map<String, Object> values = new HashMap<>();
            values.put("string", "héllo");
            values.put("int", 42);
            values.put("long", 1L << 40);
            values.put("bool", true);
            values.put("bytes", new byte[] {0, 1, 2});
            values.put("map", new HashMap<>(Map.of("a", 1, "b", List.of("x", "y"))));
            values.put("zipped", "z".repeat(100_000));
            for (var e : values.entrySet()) {
                eq(mc.set(s.k("ty-" + e.getKey()), 0, e.getValue()), true, "set " + e.getKey());
            }
            for (var e : values.entrySet()) {
                eq(mc.get(s.k("ty-" + e.getKey())), e.getValue(), "round trip of " + e.getKey());
            }
        });

        s.run("large_values", () -> {
            for (int size : LARGE_SIZES) {
                Flagged v = new Flagged(randomBytes(size, size), 3);
                eq(mc.set(s.k("big" + size), 0, v, raw), true, "set " + size + " bytes");
                eq(mc.get(s.k("big" + size), raw), v, "get " + size + " bytes");
            }
        });

        s.run("too_large_rejected", () -> {
            boolean stored;
            try {
                stored = mc.set(s.k("huge"), 0, new Flagged(new byte[2 * 1024 * 1024], 0), raw);
            } catch (net.rubyeye.xmemcached.exception.MemcachedException e) {
                stored = false;
            }
            eq(stored, false, "set of a 2 MiB value");
            eq(mc.get(s.k("huge"), raw), null, "oversized value must not be stored");
            eq(mc.set(s.k("after-huge"), 0, f("ok"), raw), true, "set after oversized set");
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
