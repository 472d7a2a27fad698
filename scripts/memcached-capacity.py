#!/usr/bin/env python3
"""How many items of a given size fit in memcached with -m 64, for comparison with the
Segcache engine's memory accounting (crates/storage/tests/it/memory.rs).

Starts Debian's memcached on a loopback port, sets keys "key:00000001".. with 50-byte values
until it starts evicting, and prints curr_items, bytes, and the per-item overhead memcached
reports. Usage: scripts/memcached-capacity.py [--memory-mib 64] [--value-bytes 50]
"""
import argparse
import socket
import subprocess
import time


def stats(sock_file):
    sock, f = sock_file
    sock.sendall(b"stats\r\n")
    out = {}
    while True:
        line = f.readline().decode().strip()
        if line == "END":
            return out
        _, name, value = line.split(" ", 2)
        out[name] = value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memory-mib", type=int, default=64)
    ap.add_argument("--value-bytes", type=int, default=50)
    ap.add_argument("--port", type=int, default=21299)
    args = ap.parse_args()
    proc = subprocess.Popen(
        ["memcached", "-l", "127.0.0.1", "-p", str(args.port), "-m", str(args.memory_mib),
         "-t", "1", "-U", "0", "-u", "nobody"])
    try:
        for _ in range(100):
            try:
                sock = socket.create_connection(("127.0.0.1", args.port))
                break
            except OSError:
                time.sleep(0.05)
        f = sock.makefile("rb")
        value = b"v" * args.value_bytes
        i = 0
        batch = 1000
        while True:
            payload = b"".join(
                b"set key:%08d 0 0 %d noreply\r\n%s\r\n" % (i + j, len(value), value)
                for j in range(batch))
            sock.sendall(payload)
            i += batch
            if i % 50000 == 0:
                s = stats((sock, f))
                if int(s["evictions"]) > 0:
                    break
        s = stats((sock, f))
        items = int(s["curr_items"])
        key_len = len(b"key:00000001")
        limit = int(s["limit_maxbytes"])
        print(f"memcached {s['version']} -m {args.memory_mib}: {items} items of "
              f"{key_len}-byte keys and {args.value_bytes}-byte values before evicting")
        print(f"  limit_maxbytes={limit} bytes(stat)={s['bytes']} "
              f"=> {limit / items:.1f} bytes of memory per item, "
              f"{limit / items - key_len - args.value_bytes:.1f} bytes beyond key+value")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
