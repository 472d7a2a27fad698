//! The meta protocol through a real socket. Expected bytes were checked against memcached
//! 1.6.18 for the same exchange (except `me`'s size, which is memfleet's own item size).

use crate::common;

use common::TestServer;

#[test]
fn meta_set_and_get_with_return_flags() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms foo 2 T0 F3\r\nhi\r\n", "HD\r\n");
    c.check(
        "mg foo v f s k O123 q\r\n",
        "VA 2 f3 s2 kfoo O123\r\nhi\r\n",
    );
    c.check("mg foo\r\n", "HD\r\n");
    c.check("mg nope v k Oab\r\n", "EN knope Oab\r\n");
    // Quiet mode: misses say nothing, `mn` marks the end of the batch.
    c.check("mg nope v q k\r\nmn\r\n", "MN\r\n");
    c.check("ms foo 2 MA q\r\n!!\r\nmg foo v\r\n", "VA 4\r\nhi!!\r\n");
    c.check("ms new 1 ME\r\nx\r\nms new 1 ME\r\nx\r\n", "HD\r\nNS\r\n");
    c.check("ms nope 1 MR\r\nx\r\n", "NS\r\n");
    c.check(
        "ms foo 2 MX\r\nzz\r\n",
        "CLIENT_ERROR invalid mode for ms M token\r\n",
    );
}

#[test]
fn meta_cas() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.send("ms k 1 c\r\na\r\n");
    let line = String::from_utf8(c.read_until(b"\r\n")).unwrap();
    let cas: u64 = line
        .trim_end()
        .strip_prefix("HD c")
        .unwrap()
        .parse()
        .unwrap();
    c.check("mg k c\r\n", format!("HD c{cas}\r\n"));
    c.check(format!("ms k 1 C{}\r\nb\r\n", cas + 1), "EX\r\n");
    c.check(format!("ms k 1 C{cas}\r\nb\r\n"), "HD\r\n");
    c.check("mg k v\r\n", "VA 1\r\nb\r\n");
    c.check("ms none 1 C5\r\nb\r\n", "NF\r\n");
    c.check(format!("md k C{}\r\n", cas.wrapping_add(12345)), "EX\r\n");
}

#[test]
fn meta_delete_and_arithmetic() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check(
        "ms new 1\r\nx\r\nmd new q\r\nmd new\r\nmd new q Oxx\r\n",
        "HD\r\nNF\r\nNF Oxx\r\n",
    );
    c.check("ma cnt\r\n", "NF\r\n");
    c.check("ma cnt N0 J10 v\r\n", "VA 2\r\n10\r\n");
    c.check("ma cnt v MD D3 t\r\n", "VA 1 t-1\r\n7\r\n");
    c.check("ma cnt q\r\nmg cnt v\r\n", "VA 2\r\n8 \r\n");
    c.check("ma cnt MI D2 Oz k\r\n", "HD Oz kcnt\r\n");
    c.check("ms t 1\r\nx\r\n", "HD\r\n");
    c.check(
        "ma t\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    );
}

#[test]
fn meta_noop_debug_and_base64_keys() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("mn\r\n", "MN\r\n");
    c.check("me nope\r\n", "EN\r\n");
    c.check("ms foo 2\r\nhi\r\n", "HD\r\n");
    c.send("me foo\r\n");
    let line = String::from_utf8(c.read_until(b"\r\n")).unwrap();
    assert!(line.starts_with("ME foo exp=-1 la=0 cas="), "{line}");
    // "Zm9v" is base64 for "foo": the same item.
    c.check("mg Zm9v b v k\r\n", "VA 2 kZm9v b\r\nhi\r\n");
    c.check("ms Zm9v 2 b k\r\nyo\r\n", "HD kZm9v b\r\n");
    c.check("get foo\r\n", "VALUE foo 0 2\r\nyo\r\nEND\r\n");
}
