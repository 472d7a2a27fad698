"""Tiny test harness shared by the Python interop suites.

Not pytest: each suite is one process per client so that `scripts/interop` can print one row per
client, and so that a client that hangs or crashes cannot take the other suites down with it.
"""

import os
import random
import sys
import time
import traceback

# A value the server must treat as opaque bytes: protocol terminators inside it must not end it.
TRICKY = b"a\r\nEND\r\nSTORED\r\n\x00\xff VALUE x 0 1\r\n"
# 500 KB and a value close to memcached's default 1 MiB item limit (the item header and key
# take the rest). Random bytes, so a client that compresses large values cannot shrink them.
LARGE_SIZES = (500 * 1024, 1024 * 1024 - 1024)


def random_bytes(n, seed):
    return random.Random(seed).randbytes(n)


class Fail(AssertionError):
    pass


def eq(actual, expected, what):
    if actual != expected:
        a, e = repr(actual), repr(expected)
        if len(a) > 200:
            a = a[:200] + "...(%d chars)" % len(a)
        if len(e) > 200:
            e = e[:200] + "...(%d chars)" % len(e)
        raise Fail("%s: expected %s, got %s" % (what, e, a))


def check(cond, what):
    if not cond:
        raise Fail(what)


def raises(fn, what):
    """Asserts that `fn()` raises; returns the exception."""
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - any client error class is acceptable here
        return e
    raise Fail("%s: expected an error, got %r" % (what, result))


class Suite:
    """Collects test functions; `run` executes them in order and reports each one."""

    def __init__(self, client_name):
        self.client_name = client_name
        # Unique per run and per client, so suites can share a server (and run in parallel).
        self.prefix = "it:%s:%d:%x:" % (client_name, os.getpid(), random.getrandbits(32))
        self.cases = []
        # Checks that need time to pass (expiry) register here and run at the end.
        self.deferred = []
        self.deferred_at = None

    def key(self, name):
        return self.prefix + name

    def case(self, fn):
        self.cases.append(fn)
        return fn

    def defer(self, name, fn, at):
        """Runs `fn` at the end, once the monotonic clock has passed `at`."""
        self.deferred.append((name, fn))
        self.deferred_at = max(self.deferred_at or 0, at)

    def run(self):
        started = time.monotonic()
        passed = failed = 0

        def one(name, fn):
            nonlocal passed, failed
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - report every failure, keep going
                failed += 1
                if isinstance(e, Fail):
                    detail = str(e)
                else:
                    detail = "".join(traceback.format_exception_only(type(e), e)).strip()
                    tb = traceback.extract_tb(e.__traceback__)
                    if tb:
                        detail += " (at %s:%d)" % (os.path.basename(tb[-1].filename), tb[-1].lineno)
                print("  FAIL %s/%s: %s" % (self.client_name, name, detail), flush=True)
            else:
                passed += 1
                print("  ok   %s/%s" % (self.client_name, name), flush=True)

        for fn in self.cases:
            one(fn.__name__, fn)
        if self.deferred:
            delay = self.deferred_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            for name, fn in self.deferred:
                one(name, fn)
        print(
            "%s: %d passed, %d failed (%.1fs)"
            % (self.client_name, passed, failed, time.monotonic() - started),
            flush=True,
        )
        return failed == 0


def parse_addr(argv):
    if len(argv) != 2 or ":" not in argv[1]:
        sys.exit("usage: %s HOST:PORT" % argv[0])
    host, port = argv[1].rsplit(":", 1)
    return host, int(port)
