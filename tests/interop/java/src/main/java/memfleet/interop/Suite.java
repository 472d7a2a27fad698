package memfleet.interop;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Random;

/** Minimal test harness: runs named checks in order, reports each, counts failures. */
final class Suite {
    /** A value the server must treat as opaque bytes: protocol terminators inside must not end it. */
    static final byte[] TRICKY = "a\r\nEND\r\nSTORED\r\n\u0000\u00ff VALUE x 0 1\r\n"
            .getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);
    /** 500 KB, and a value close to memcached's default 1 MiB item limit. */
    static final int[] LARGE_SIZES = {500 * 1024, 1024 * 1024 - 1024};

    /** A check body; may throw anything (clients throw checked exceptions). */
    interface Body {
        void run() throws Exception;
    }

    static final class Failure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Failure(String msg) {
            super(msg);
        }
    }

    private final String client;
    final String prefix;
    private int passed;
    private int failed;
    private final List<String> deferredNames = new ArrayList<>();
    private final List<Body> deferredBodies = new ArrayList<>();
    private long deferredAtNanos;
    private final long startNanos = System.nanoTime();

    Suite(String client) {
        this.client = client;
        this.prefix = "it:" + client + ":" + ProcessHandle.current().pid() + ":"
                + Integer.toHexString(new Random().nextInt()) + ":";
    }

    String k(String name) {
        return prefix + name;
    }

    void run(String name, Body body) {
        try {
            body.run();
            passed++;
            System.out.println("  ok   " + client + "/" + name);
        } catch (Failure f) {
            failed++;
            System.out.println("  FAIL " + client + "/" + name + ": " + f.getMessage());
        } catch (Throwable t) {
            failed++;
            StackTraceElement at = null;
            for (StackTraceElement e : t.getStackTrace()) {
                if (e.getClassName().startsWith("memfleet.")) {
                    at = e;
                    break;
                }
            }
            System.out.println("  FAIL " + client + "/" + name + ": " + t
                    + (at == null ? "" : " (at " + at.getFileName() + ":" + at.getLineNumber() + ")"));
        }
        System.out.flush();
    }

    /** Runs `body` at the end, once `delayMillis` from now has passed (expiry checks). */
    void defer(String name, long delayMillis, Body body) {
        deferredNames.add(name);
        deferredBodies.add(body);
        deferredAtNanos = Math.max(deferredAtNanos, System.nanoTime() + delayMillis * 1_000_000);
    }

    /** Runs the deferred checks, prints the summary and returns whether everything passed. */
    boolean finish() throws InterruptedException {
        if (!deferredBodies.isEmpty()) {
            long wait = deferredAtNanos - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000 + 1);
            }
            for (int i = 0; i < deferredBodies.size(); i++) {
                run(deferredNames.get(i), deferredBodies.get(i));
            }
        }
        System.out.printf("%s: %d passed, %d failed (%.1fs)%n", client, passed, failed,
                (System.nanoTime() - startNanos) / 1e9);
        return failed == 0;
    }

    static void eq(Object actual, Object expected, String what) {
        boolean same = (actual instanceof byte[] a && expected instanceof byte[] e)
                ? Arrays.equals(a, e) : Objects.equals(actual, expected);
        if (!same) {
            throw new Failure(what + ": expected " + show(expected) + ", got " + show(actual));
        }
    }

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new Failure(what);
        }
    }

    /** Asserts that `body` throws; returns what it threw. */
    static Throwable raises(Body body, String what) {
        try {
            body.run();
        } catch (Throwable t) {
            return t;
        }
        throw new Failure(what + ": expected an error, got none");
    }

    static String show(Object o) {
        if (o instanceof byte[] b) {
            String s = new String(b, 0, Math.min(b.length, 80), java.nio.charset.StandardCharsets.ISO_8859_1);
            return "bytes[" + b.length + "] \"" + s.replace("\r", "\\r").replace("\n", "\\n") + "\"";
        }
        if (o instanceof String s) {
            return "\"" + (s.length() > 80 ? s.substring(0, 80) + "...(" + s.length() + " chars)" : s) + "\"";
        }
        return String.valueOf(o);
    }

    static byte[] randomBytes(int n, long seed) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    static byte[] bytes(String s) {
        return s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }
}
