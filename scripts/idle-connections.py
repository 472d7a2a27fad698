#!/usr/bin/env python3
"""RSS growth of a memcached-protocol server for N idle connections.

Starts the server (a command with {port}), records its RSS, opens N connections that each
send one request and read its reply (so every connection has used its buffers), records RSS
again, and prints the growth per connection. Example:

    scripts/idle-connections.py --count 10000 \
        --server 'target/release/memfleet server -p {port} -t 1 -c 20000' \
        --server 'memcached -u nobody -l 127.0.0.1 -p {port} -U 0 -t 1 -c 20000'
"""
import argparse, resource, shlex, socket, subprocess, time

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def measure(cmd, count):
    port = free_port()
    proc = subprocess.Popen(shlex.split(cmd.format(port=port)), stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port)).close(); break
            except OSError:
                time.sleep(0.05)
        warm = socket.create_connection(("127.0.0.1", port))
        warm.sendall(b"set k 0 0 100\r\n" + b"v" * 100 + b"\r\n"); warm.recv(100)
        time.sleep(0.3)
        before = rss_kib(proc.pid)
        conns = []
        for _ in range(count):
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(b"get k\r\n")
            got = b""
            while not got.endswith(b"END\r\n"):
                got += c.recv(4096)
            conns.append(c)
        time.sleep(0.5)
        after = rss_kib(proc.pid)
        for c in conns: c.close()
        return before, after
    finally:
        proc.terminate(); proc.wait()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--server", action="append", required=True)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"{'server':60} {'RSS before':>11} {'RSS after':>11} {'per conn':>9}")
    for cmd in a.server:
        before, after = measure(cmd, a.count)
        print(f"{cmd[:60]:60} {before:>8} KiB {after:>8} KiB {(after - before) * 1024 / a.count:>7.0f} B")

if __name__ == "__main__":
    main()
