package memfleet.interop;

import static memfleet.interop.Suite.check;
import static memfleet.interop.Suite.eq;

import java.util.concurrent.TimeUnit;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.auth.AuthDescriptor;
import net.spy.memcached.auth.PlainCallbackHandler;

/**
 * spymemcached's binary SASL with its PLAIN handler against a server started with {@code -S}:
 * the user and password come from MEMFLEET_INTEROP_SASL_USER and MEMFLEET_INTEROP_SASL_PASSWORD.
 */
final class SpySaslSuite {
    private SpySaslSuite() {}

    private static MemcachedClient client(String addr, String user, String password) throws Exception {
        AuthDescriptor auth = new AuthDescriptor(new String[] {"PLAIN"},
                new PlainCallbackHandler(user, password));
        ConnectionFactoryBuilder b = new ConnectionFactoryBuilder()
                .setProtocol(ConnectionFactoryBuilder.Protocol.BINARY)
                .setAuthDescriptor(auth)
                .setOpTimeout(3_000)
                .setFailureMode(FailureMode.Cancel)
                .setDaemon(true);
        return new MemcachedClient(b.build(), AddrUtil.getAddresses(addr));
    }

    static boolean run(String addr) throws Exception {
        String user = System.getenv("MEMFLEET_INTEROP_SASL_USER");
        String password = System.getenv("MEMFLEET_INTEROP_SASL_PASSWORD");
        Suite s = new Suite("spymemcached-sasl");
        MemcachedClient mc = client(addr, user, password);
        try {
            s.run("plain_login_then_set_get", () -> {
                eq(mc.set(s.k("a"), 0, "hello").get(5, TimeUnit.SECONDS), true, "set after PLAIN");
                eq(mc.get(s.k("a")), "hello", "get");
            });
            s.run("cas_incr_delete", () -> {
                mc.set(s.k("c"), 0, "v1").get(5, TimeUnit.SECONDS);
                CASValue<Object> got = mc.gets(s.k("c"));
                eq(mc.cas(s.k("c"), got.getCas(), "v2"), CASResponse.OK, "cas with the current token");
                eq(mc.cas(s.k("c"), got.getCas(), "v3"), CASResponse.EXISTS, "cas with a stale token");
                eq(mc.incr(s.k("n"), 5, 10), 10L, "incr creates");
                eq(mc.incr(s.k("n"), 5, 10), 15L, "incr");
                eq(mc.delete(s.k("c")).get(5, TimeUnit.SECONDS), true, "delete");
            });
        } finally {
            mc.shutdown();
        }
        s.run("a_wrong_password_gets_nothing", () -> {
            MemcachedClient bad = client(addr, user, password + "-wrong");
            try {
                boolean served;
                try {
                    served = bad.set(s.k("bad"), 0, "x").get(4, TimeUnit.SECONDS);
                } catch (Exception e) {
                    served = false;
                }
                check(!served, "a set with a wrong password must not be stored");
            } finally {
                bad.shutdown(1, TimeUnit.SECONDS);
            }
        });
        return s.finish();
    }
}
