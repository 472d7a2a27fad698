package memfleet.interop;

import static memfleet.interop.Suite.check;
import static memfleet.interop.Suite.eq;

import java.util.concurrent.TimeUnit;
import net.rubyeye.xmemcached.GetsResponse;
import net.rubyeye.xmemcached.XMemcachedClientBuilder;
import net.rubyeye.xmemcached.command.BinaryCommandFactory;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;

/**
 * CAS round trips of spymemcached and xmemcached, text and binary: gets, a cas with the token
 * stores, the same token again and an older one are refused. With MEMFLEET_INTEROP_CAS_ABOVE=N
 * (a server started with {@code --test-cas-start N}) each token must also be above N: 2^31 and
 * 2^32 check that a Java {@code long} carries tokens an {@code int} or 32 bits would not.
 */
final class CasRangeSuite {
    private CasRangeSuite() {}

    private static long above() {
        String v = System.getenv("MEMFLEET_INTEROP_CAS_ABOVE");
        return v == null ? 0 : Long.parseLong(v);
    }

    static boolean runSpy(String addr) throws Exception {
        Suite s = new Suite("spymemcached-cas");
        for (boolean binary : new boolean[] {false, true}) {
            MemcachedClient mc = new MemcachedClient(new ConnectionFactoryBuilder()
                    .setProtocol(binary ? ConnectionFactoryBuilder.Protocol.BINARY
                            : ConnectionFactoryBuilder.Protocol.TEXT)
                    .setOpTimeout(3_000).setFailureMode(FailureMode.Retry).setDaemon(true).build(),
                    net.spy.memcached.AddrUtil.getAddresses(addr));
            String proto = binary ? "binary" : "text";
            try {
                s.run("cas_round_trip_" + proto, () -> {
                    String k = s.k("cas-" + proto);
                    eq(mc.set(k, 0, "v1").get(5, TimeUnit.SECONDS), true, "set");
                    CASValue<Object> got = mc.gets(k);
                    long token = got.getCas();
                    check(token > above(), "token " + token + " above " + above());
                    eq(mc.cas(k, token, "v2"), CASResponse.OK, "cas with the token");
                    eq(mc.cas(k, token, "v3"), CASResponse.EXISTS, "the same token again");
                    eq(mc.cas(k, token - 1, "v4"), CASResponse.EXISTS, "an older token");
                    eq(mc.get(k), "v2", "the value the token's cas stored");
                    check(mc.gets(k).getCas() > token, "the next token is larger");
                });
            } finally {
                mc.shutdown();
            }
        }
        return s.finish();
    }

    static boolean runXmem(String addr) throws Exception {
        Suite s = new Suite("xmemcached-cas");
        for (boolean binary : new boolean[] {false, true}) {
            XMemcachedClientBuilder b = new XMemcachedClientBuilder(
                    net.rubyeye.xmemcached.utils.AddrUtil.getAddresses(addr));
            if (binary) {
                b.setCommandFactory(new BinaryCommandFactory());
            }
            b.setOpTimeout(3_000);
            b.setConnectTimeout(3_000);
            net.rubyeye.xmemcached.MemcachedClient mc = b.build();
            String proto = binary ? "binary" : "text";
            try {
                s.run("cas_round_trip_" + proto, () -> {
                    String k = s.k("cas-" + proto);
                    eq(mc.set(k, 0, "v1"), true, "set");
                    GetsResponse<Object> got = mc.gets(k);
                    long token = got.getCas();
                    check(token > above(), "token " + token + " above " + above());
                    eq(mc.cas(k, 0, "v2", token), true, "cas with the token");
                    eq(mc.cas(k, 0, "v3", token), false, "the same token again");
                    eq(mc.cas(k, 0, "v4", token - 1), false, "an older token");
                    eq(mc.get(k), "v2", "the value the token's cas stored");
                    check(mc.<Object>gets(k).getCas() > token, "the next token is larger");
                });
            } finally {
                mc.shutdown();
            }
        }
        return s.finish();
    }
}
