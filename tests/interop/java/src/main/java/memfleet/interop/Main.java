package memfleet.interop;

import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Entry point: {@code java memfleet.interop.Main CLIENT HOST:PORT} with CLIENT one of
 * spymemcached-text, spymemcached-binary, xmemcached-text, xmemcached-binary, spymemcached-sasl, spymemcached-cas, xmemcached-cas. Exit status 0 when
 * every check passed.
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Main CLIENT HOST:PORT");
            System.exit(2);
        }
        // spymemcached logs connection chatter at INFO to stderr by default.
        System.setProperty("net.spy.log.LoggerImpl", "net.spy.memcached.compat.log.SunLogger");
        Logger.getLogger("").setLevel(Level.SEVERE);
        boolean ok = switch (args[0]) {
            case "spymemcached-text" -> SpySuite.run(args[1], false);
            case "spymemcached-binary" -> SpySuite.run(args[1], true);
            case "xmemcached-text" -> XmemSuite.run(args[1], false);
            case "xmemcached-binary" -> XmemSuite.run(args[1], true);
            case "spymemcached-sasl" -> SpySaslSuite.run(args[1]);
            case "spymemcached-cas" -> CasRangeSuite.runSpy(args[1]);
            case "xmemcached-cas" -> CasRangeSuite.runXmem(args[1]);
            default -> {
                System.err.println("unknown client " + args[0]);
                yield false;
            }
        };
        System.exit(ok ? 0 : 1);
    }
}
