"""python-binary-memcached (bmemcached: binary protocol with SASL PLAIN, written for Heroku's
MemCachier) against a server started with -S. Usage: HOST:PORT, with the user and password in
MEMFLEET_INTEROP_SASL_USER and MEMFLEET_INTEROP_SASL_PASSWORD."""

import os
import socket
import struct
import sys

import bmemcached
from bmemcached.exceptions import MemcachedException

from harness import Suite, check, eq, parse_addr, raises

host, port = parse_addr(sys.argv)
addr = "%s:%d" % (host, port)
user = os.environ["MEMFLEET_INTEROP_SASL_USER"]
password = os.environ["MEMFLEET_INTEROP_SASL_PASSWORD"]
mc = bmemcached.Client((addr,), user, password, socket_timeout=3)
s = Suite("bmemcached-sasl")
k = s.key


@s.case
def plain_login_then_commands():
    eq(mc.set(k("a"), "hello"), True, "set after PLAIN")
    eq(mc.get(k("a")), "hello", "get")
    eq(mc.get_multi([k("a"), k("missing")]), {k("a"): "hello"}, "get_multi")
    value, cas = mc.gets(k("a"))
    eq(value, "hello", "gets")
    eq(mc.cas(k("a"), "v2", cas), True, "cas with the current token")
    eq(mc.cas(k("a"), "v3", cas), False, "cas with a stale token")
    eq(mc.add(k("n"), "10"), True, "add")
    eq(mc.incr(k("n"), 5), 15, "incr")
    eq(mc.delete(k("a")), True, "delete")


@s.case
def a_wrong_password_is_auth_failure():
    bad = bmemcached.Client((addr,), user, password + "-wrong", socket_timeout=3)
    e = raises(lambda: bad.set(k("bad"), "x"), "set with a wrong password")
    check(isinstance(e, MemcachedException) and "Auth failure" in str(e), "memcached's words: %r" % e)
    eq(mc.get(k("bad")), None, "nothing stored")


@s.case
def no_login_is_refused_and_closed():
    # A binary get before logging in: "Auth failure." (status 0x20), then the server closes.
    sock = socket.create_connection((host, port), timeout=3)
    key = k("a").encode()
    sock.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0, len(key), 1, 0) + key)
    head = sock.recv(24, socket.MSG_WAITALL)
    status, body_len = struct.unpack(">H", head[6:8])[0], struct.unpack(">I", head[8:12])[0]
    eq((status, sock.recv(body_len, socket.MSG_WAITALL)), (0x20, b"Auth failure."), "refusal")
    eq(sock.recv(1), b"", "closed after the refusal")
    sock.close()


sys.exit(0 if s.run() else 1)
