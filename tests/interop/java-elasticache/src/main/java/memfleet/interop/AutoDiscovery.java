package memfleet.interop;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import net.spy.memcached.ClientMode;
import net.spy.memcached.DefaultConnectionFactory;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.config.NodeEndPoint;

/**
 * AWS's ElastiCache cluster client 1.2.0 in dynamic mode, its configuration endpoint a memfleet
 * router pool with {@code auto_discovery = true}:
 * {@code java memfleet.interop.AutoDiscovery HOST:PORT FIRST_PORTS ALL_PORTS}. It must find the
 * servers FIRST_PORTS (comma-separated), store and read keys on them, print {@code READY}, then
 * follow a membership change to ALL_PORTS (made by the caller after READY: a router reload)
 * within 30 s, and store and read keys over all of them. One {@code ok}/{@code FAIL} line per
 * check, then {@code elasticache-auto-discovery: N passed, N failed}.
 */
public final class AutoDiscovery {
    private static int passed;
    private static int failed;

    private AutoDiscovery() {}

    private static void check(boolean ok, String what) {
        if (ok) {
            passed++;
            System.out.println("  ok   elasticache-auto-discovery/" + what);
        } else {
            failed++;
            System.out.println("  FAIL elasticache-auto-discovery/" + what);
        }
        System.out.flush();
    }

    private static Set<Integer> ports(String list) {
        Set<Integer> out = new TreeSet<>();
        for (String p : list.split(",")) {
            out.add(Integer.parseInt(p.trim()));
        }
        return out;
    }

    private static Set<Integer> found(MemcachedClient mc) {
        Set<Integer> out = new TreeSet<>();
        for (NodeEndPoint e : mc.getAllNodeEndPoints()) {
            out.add(e.getPort());
        }
        return out;
    }

    private static boolean waitFor(MemcachedClient mc, Set<Integer> want, long seconds)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (System.nanoTime() < deadline) {
            if (found(mc).equals(want)) {
                return true;
            }
            Thread.sleep(100);
        }
        return false;
    }

    private static boolean roundTrip(MemcachedClient mc, String prefix, int n) throws Exception {
        for (int i = 0; i < n; i++) {
            if (!mc.set(prefix + i, 0, "v" + i).get(5, TimeUnit.SECONDS)) {
                return false;
            }
        }
        for (int i = 0; i < n; i++) {
            if (!("v" + i).equals(mc.get(prefix + i))) {
                return false;
            }
        }
        return true;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: AutoDiscovery HOST:PORT FIRST_PORTS ALL_PORTS");
            System.exit(2);
        }
        Logger.getLogger("").setLevel(Level.SEVERE);
        System.setProperty("net.spy.log.LoggerImpl", "net.spy.memcached.compat.log.SunLogger");
        String[] hp = args[0].split(":");
        Set<Integer> first = ports(args[1]);
        Set<Integer> all = ports(args[2]);
        // Dynamic mode (the configuration endpoint), polled every second instead of 60.
        DefaultConnectionFactory cf = new DefaultConnectionFactory(ClientMode.Dynamic) {
            @Override
            public long getDynamicModePollingInterval() {
                return 1000;
            }

            @Override
            public boolean isDaemon() {
                return true;
            }
        };
        MemcachedClient mc;
        try {
            mc = new MemcachedClient(cf, List.of(new InetSocketAddress(hp[0], Integer.parseInt(hp[1]))));
        } catch (IOException e) {
            check(false, "connect to the configuration endpoint: " + e);
            System.out.println("elasticache-auto-discovery: " + passed + " passed, " + failed + " failed");
            System.exit(1);
            return;
        }
        String prefix = "it:elasticache:" + ProcessHandle.current().pid() + ":";
        check(waitFor(mc, first, 10), "finds the pool's servers " + first + " (found " + found(mc) + ")");
        check(roundTrip(mc, prefix + "a:", 100), "stores and reads 100 keys on them");
        System.out.println("READY");
        System.out.flush();
        check(waitFor(mc, all, 30), "follows the change to " + all + " (found " + found(mc) + ")");
        check(roundTrip(mc, prefix + "b:", 300), "stores and reads 300 keys over all of them");
        mc.shutdown(2, TimeUnit.SECONDS);
        System.out.println("elasticache-auto-discovery: " + passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }
}
