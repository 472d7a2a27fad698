//! What memcached 1.6.45's meta protocol reports about an item's use, through a real socket:
//! the fetched mark (`h`), the last access (`l`), reads that record nothing (`u`, `me`), and
//! the flags `ms` answers whatever happened (`s`, `c0`). Expected bytes were checked against
//! memcached 1.6.45 for the same exchange (CAS values aside: memfleet's are not a counter).

use crate::common;

use common::{Client, TestServer};
use std::time::Duration;

#[test]
fn hit_before_is_set_by_the_first_read_and_cleared_by_a_write() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms hit 3 T100\r\nhit\r\n", "HD\r\n");
    c.check("mg hit s h\r\n", "HD s3 h0\r\n");
    c.check("mg hit s h\r\n", "HD s3 h1\r\n");
    c.check("ms hit 3\r\nnew\r\n", "HD\r\n");
    c.check("mg hit h\r\n", "HD h0\r\n");
    // A plain get marks it too.
    c.check(
        "ms g 1\r\nx\r\nget g\r\n",
        "HD\r\nVALUE g 0 1\r\nx\r\nEND\r\n",
    );
    c.check("mg g h\r\n", "HD h1\r\n");
}

#[test]
fn no_update_reads_leave_the_item_as_it_was() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms nu 3 T100\r\nhit\r\n", "HD\r\n");
    c.check("mg nu s u h\r\n", "HD s3 h0\r\n");
    // This read marks it, but reports the state before it.
    c.check("mg nu s h\r\n", "HD s3 h0\r\n");
    c.check("mg nu s u h\r\n", "HD s3 h1\r\n");
}

#[test]
fn last_access_and_the_me_line() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms la 2 T100\r\nla\r\n", "HD\r\n");
    let me = ask(&mut c, "me la\r\n");
    assert!(
        me.starts_with("ME la exp=") && me.contains(" fetch=no "),
        "{me}"
    );
    // `exp=` counts down (memcached 1.6.45), `la=` is the idle time.
    let exp: i64 = field(&me, "exp=").parse().unwrap();
    assert!((95..=100).contains(&exp), "{me}");
    std::thread::sleep(Duration::from_millis(2100));
    let mg = ask(&mut c, "mg la l\r\n");
    let idle: u32 = mg.trim_end().strip_prefix("HD l").unwrap().parse().unwrap();
    assert!((2..=3).contains(&idle), "{mg}");
    let me = ask(&mut c, "me la\r\n");
    assert!(me.contains(" la=0 ") && me.contains(" fetch=yes "), "{me}");
    c.check("me nope\r\n", "EN\r\n");
}

#[test]
fn meta_set_reports_size_and_a_zero_cas_when_nothing_was_stored() {
    let s = TestServer::start();
    let mut c = s.connect();
    let line = ask(&mut c, "ms k 2 s c\r\nab\r\n");
    assert!(
        line.starts_with("HD s2 c") && line != "HD s2 c0\r\n",
        "{line}"
    );
    // (The first write's unique is 1, as memcached's: a stale CAS here is a far one.)
    c.check("ms k 2 s c C999999\r\nab\r\n", "EX s2 c0\r\n");
    c.check("ms none 2 c C1 k\r\nab\r\n", "NF c0 knone\r\n");
    c.check("ms k 3 c ME\r\nabc\r\n", "NS c0\r\n");
    // `t` is not an `ms` return flag.
    c.check("ms k 2 T50 t\r\nab\r\n", "HD\r\n");
}

#[test]
fn a_new_placeholder_shows_no_ttl_before_n() {
    let s = TestServer::start();
    let mut c = s.connect();
    let won = ask(&mut c, "mg viv s t N30\r\n");
    assert_eq!(won, "HD s0 t-1 W\r\n");
    let again = ask(&mut c, "mg viv t N30\r\n");
    assert!(
        again.starts_with("HD t") && again.ends_with("Z\r\n"),
        "{again}"
    );
    assert!(!again.starts_with("HD t-1"), "{again}");
}

#[test]
fn short_lines_and_incomplete_storage_commands_are_format_errors() {
    let s = TestServer::start();
    let mut c = s.connect();
    let bclf = "CLIENT_ERROR bad command line format\r\n";
    c.check("\r\n", bclf);
    c.check("a\r\n", bclf);
    c.check("mg\r\n", bclf);
    c.check("   \r\n", "ERROR\r\n");
    // The value of a `cas` without its unique is swallowed, not run as a command.
    c.check(
        "cas foo 0 0 6 \r\nbarva2\r\nmn\r\n",
        format!("{bclf}MN\r\n"),
    );
    c.check("set foo 0 0\r\nmn\r\n", format!("{bclf}MN\r\n"));
    c.check("set foo 0 0 1 extra tokens\r\nx\r\n", "STORED\r\n");
}

#[test]
fn flush_all_can_be_disabled() {
    let s = TestServer::with(|s| s.flush_disabled = true);
    let mut c = s.connect();
    c.check("set k 0 0 1\r\nx\r\n", "STORED\r\n");
    c.check("flush_all\r\n", "CLIENT_ERROR flush_all not allowed\r\n");
    c.check("flush_all 0 noreply\r\nmn\r\n", "MN\r\n");
    c.check("get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n");
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let at = line.find(name).unwrap() + name.len();
    line[at..].split(' ').next().unwrap()
}

fn ask(c: &mut Client, request: &str) -> String {
    c.send(request);
    c.read_line()
}
