//! Text-protocol behaviour memcached 1.6.45 has and 1.6.18 lacked, through a real socket:
//! how `incr`/`decr` write back an item a pending reply holds, replies waiting while a data
//! block arrives, and the command-line rules of 1.6.45's parser. Expected bytes were checked
//! against memcached 1.6.45 for the same exchanges (CI has only Debian's 1.6.18, where the
//! differential test skips these cases).

use crate::common;

use common::{esc, Client, TestServer};
use std::io::Read;
use std::time::Duration;

/// Asserts that nothing arrives for a while (the server holds its replies).
#[track_caller]
fn nothing_yet(c: &mut Client) {
    c.stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 256];
    match c.stream.read(&mut buf) {
        Ok(n) => panic!("expected nothing yet, got {}", esc(&buf[..n])),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
}

#[test]
fn decr_pads_in_place_unless_a_reply_of_the_same_write_holds_the_item() {
    let s = TestServer::start();
    let mut c = s.connect();
    let hundred = "set n 0 0 3\r\n100\r\n";
    // Nobody holds it: padded to the old length.
    c.check(hundred, "STORED\r\n");
    c.check("get n\r\n", "VALUE n 0 3\r\n100\r\nEND\r\n");
    c.check("decr n 95\r\n", "5\r\n");
    c.check("get n\r\n", "VALUE n 0 3\r\n5  \r\nEND\r\n");
    // A get in the same write holds it: a new item, as long as its digits; the new item is
    // not held, so the next decr is in place again.
    c.check(hundred, "STORED\r\n");
    c.check(
        "get n\r\ndecr n 95\r\ndecr n 1\r\nget n\r\n",
        "VALUE n 0 3\r\n100\r\nEND\r\n5\r\n4\r\nVALUE n 0 1\r\n4\r\nEND\r\n",
    );
    // Any mg holds it, with or without a value; ma writes back the same way.
    c.check(hundred, "STORED\r\n");
    c.check(
        "mg n\r\ndecr n 95\r\nget n\r\n",
        "HD\r\n5\r\nVALUE n 0 1\r\n5\r\nEND\r\n",
    );
    c.check(hundred, "STORED\r\n");
    c.check(
        "mg n v\r\nma n MD D95\r\nget n\r\n",
        "VA 3\r\n100\r\nHD\r\nVALUE n 0 1\r\n5\r\nEND\r\n",
    );
    // mn sends the replies so far, releasing the item; me and touch never hold it.
    for between in ["get n\r\nmn\r\n", "me n\r\n", "touch n 0\r\n"] {
        c.check(hundred, "STORED\r\n");
        c.send(format!("{between}decr n 95\r\n"));
        c.read_until(b"5\r\n");
        c.check("get n\r\n", "VALUE n 0 3\r\n5  \r\nEND\r\n");
    }
    // A write in between replaced the held item: the new one is padded.
    c.check(hundred, "STORED\r\n");
    c.check(
        "get n\r\nappend n 0 0 1\r\n \r\ndecr n 95\r\nget n\r\n",
        "VALUE n 0 3\r\n100\r\nEND\r\nSTORED\r\n5\r\nVALUE n 0 4\r\n5   \r\nEND\r\n",
    );
    // memcached sends the replies so far after 21 requests of one read.
    for (versions, value) in [(19, "5"), (20, "5  ")] {
        c.check(hundred, "STORED\r\n");
        c.send(format!(
            "get n\r\n{}decr n 95\r\n",
            "version\r\n".repeat(versions)
        ));
        c.read_until(b"5\r\n");
        c.check(
            "get n\r\n",
            format!("VALUE n 0 {}\r\n{value}\r\nEND\r\n", value.len()),
        );
    }
}

#[test]
fn replies_wait_while_a_data_block_arrives() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.send("get a\r\nset j 0 0 2\r\na");
    nothing_yet(&mut c);
    c.check(
        "b\r\nget j\r\n",
        "END\r\nSTORED\r\nVALUE j 0 2\r\nab\r\nEND\r\n",
    );
    // The block completes: what came before it and its own reply go out, what follows it
    // in the same write waits for the next block.
    c.send("set k 0 0 2\r\nab\r");
    nothing_yet(&mut c);
    c.send("\nget k\r\nms m 2\r\ncd");
    assert_eq!(c.read_line(), "STORED\r\n");
    nothing_yet(&mut c);
    c.check("\r\nmn\r\n", "VALUE k 0 2\r\nab\r\nEND\r\nHD\r\nMN\r\n");
    // A refused block is swallowed before its error goes out.
    c.send("get a\r\nset big 0 0 2000000\r\nxx");
    nothing_yet(&mut c);
    c.send(vec![b'x'; 1_999_998]);
    c.check(
        "\r\nmn\r\n",
        "END\r\nSERVER_ERROR object too large for cache\r\nMN\r\n",
    );
}

#[test]
fn command_lines_are_read_as_memcached_1_6_45_reads_them() {
    let s = TestServer::start();
    let mut c = s.connect();
    // A NUL is an ordinary byte: part of a key, or a number that does not parse.
    c.check("set a\0b 0 0 1\r\nx\r\n", "STORED\r\n");
    c.check("get a\0b a\r\n", "VALUE a\0b 0 1\r\nx\r\nEND\r\n");
    let bad = "CLIENT_ERROR bad command line format\r\n";
    c.check("set a 0 0 1\0\r\nx\r\n", format!("{bad}{bad}"));
    // The command is what precedes the first space; after a leading space only the
    // administrative commands run.
    c.check("  get a\r\n", "ERROR\r\n");
    c.check("  flush_all\r\n", "OK\r\n");
    c.check("bget a\r\n", "ERROR\r\n");
    // Under four bytes with the line ending.
    c.check("md\n", bad);
    // An over-long key in a retrieval command: the error line ends twice, and under
    // noreply only the second end is sent.
    let long = "k".repeat(251);
    c.check(format!("get a {long}\r\n"), format!("{bad}\r\n"));
    c.check(format!("get {long} noreply\r\nmn\r\n"), "\r\nMN\r\n");
    // A stray HTTP line closes the connection whatever its first word.
    c.send("sx / HTTP/1.1\r\n");
    assert!(c.is_closed());
}

#[test]
fn debugtime_moves_the_clock_only_with_debug_time() {
    let plain = TestServer::start();
    plain.connect().check("debugtime 3\r\n", "ERROR\r\n");
    let s = TestServer::with(|s| s.debug_time = true);
    let mut c = s.connect();
    c.check(
        "set k 0 3 1\r\nx\r\nset j 0 100 1\r\ny\r\n",
        "STORED\r\nSTORED\r\n",
    );
    c.check("get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n");
    c.check("debugtime 3\r\n", "OK\r\n");
    c.check("get k j\r\n", "VALUE j 0 1\r\ny\r\nEND\r\n");
    // Stopped, the clock still moves when told to.
    c.check("debugtime p\r\n", "OK\r\n");
    c.check("debugtime 100\r\n", "OK\r\n");
    c.check("get j\r\n", "END\r\n");
    c.check("debugtime r\r\n", "OK\r\n");
    c.check("debugtime\r\n", "ERROR\r\n");
    c.check("debugtime soon\r\n", "ERROR\r\n");
}
