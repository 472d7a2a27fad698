//! A small binary-protocol corpus: each request carries its own opaque so that replies can
//! be told apart; CAS values from earlier replies come in through the step builders.

use crate::differential::harness::{bin_request, binary, Case, Group, Step};

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCREMENT: u8 = 0x05;
const DECREMENT: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const SETQ: u8 = 0x11;
const DELETEQ: u8 = 0x14;
const QUITQ: u8 = 0x17;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

fn arith_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    [
        &delta.to_be_bytes()[..],
        &initial.to_be_bytes(),
        &exptime.to_be_bytes(),
    ]
    .concat()
}

fn set(op: u8, key: &[u8], value: &[u8], flags: u32, opaque: u32, cas: u64) -> Vec<u8> {
    bin_request(op, key, &set_extras(flags, 0), value, opaque, cas)
}

fn simple(op: u8, key: &[u8], opaque: u32) -> Vec<u8> {
    bin_request(op, key, b"", b"", opaque, 0)
}

/// A step of fixed packets.
fn packets(p: Vec<Vec<u8>>) -> Step {
    let bytes = p.concat();
    binary(move |_| bytes.clone())
}

/// Every binary-protocol case.
pub fn cases() -> Vec<Case> {
    let mut g = Group::binary("binary");
    g.named("noop", vec![packets(vec![simple(NOOP, b"", 1)])]);
    g.named("get miss", vec![packets(vec![simple(GET, b"k", 1)])]);
    g.named(
        "set then get and getk",
        vec![packets(vec![
            set(SET, b"k", b"hello", 0xdead_beef, 1, 0),
            simple(GET, b"k", 2),
            simple(GETK, b"k", 3),
        ])],
    );
    g.named(
        "getq and getkq answer hits only, noop flushes",
        vec![packets(vec![
            set(SETQ, b"k", b"v", 7, 1, 0),
            simple(GETQ, b"nope", 2),
            simple(GETQ, b"k", 3),
            simple(GETKQ, b"nope", 4),
            simple(GETKQ, b"k", 5),
            simple(NOOP, b"", 6),
        ])],
    );
    g.named(
        "add, replace",
        vec![packets(vec![
            set(ADD, b"k", b"1", 0, 1, 0),
            set(ADD, b"k", b"2", 0, 2, 0),
            set(REPLACE, b"k", b"3", 0, 3, 0),
            set(REPLACE, b"z", b"4", 0, 4, 0),
            simple(GET, b"k", 5),
        ])],
    );
    g.named(
        "delete",
        vec![packets(vec![
            set(SET, b"k", b"v", 0, 1, 0),
            simple(DELETE, b"k", 2),
            simple(DELETE, b"k", 3),
            simple(GET, b"k", 4),
            set(SET, b"k", b"v", 0, 5, 0),
            simple(DELETEQ, b"k", 6),
            simple(DELETEQ, b"k", 7),
        ])],
    );
    g.named(
        "incr with initial, decr floor",
        vec![packets(vec![
            bin_request(INCREMENT, b"n", &arith_extras(5, 10, 0), b"", 1, 0),
            bin_request(INCREMENT, b"n", &arith_extras(5, 10, 0), b"", 2, 0),
            bin_request(DECREMENT, b"n", &arith_extras(100, 0, 0), b"", 3, 0),
            simple(GET, b"n", 4),
            bin_request(INCREMENT, b"m", &arith_extras(1, 0, 0xffff_ffff), b"", 5, 0),
            set(SET, b"s", b"abc", 0, 6, 0),
            bin_request(INCREMENT, b"s", &arith_extras(1, 0, 0), b"", 7, 0),
        ])],
    );
    g.named(
        "cas: a token works once",
        vec![
            packets(vec![set(SET, b"k", b"a", 0, 1, 0)]),
            binary(|cas| set(SET, b"k", b"b", 0, 2, cas.first().copied().unwrap_or(0))),
            binary(|cas| set(SET, b"k", b"c", 0, 3, cas.first().copied().unwrap_or(0))),
            packets(vec![simple(GET, b"k", 4)]),
        ],
    );
    g.named(
        "append, prepend",
        vec![packets(vec![
            set(SET, b"k", b"b", 3, 1, 0),
            bin_request(APPEND, b"k", b"", b"c", 2, 0),
            bin_request(PREPEND, b"k", b"", b"a", 3, 0),
            simple(GET, b"k", 4),
            bin_request(APPEND, b"z", b"", b"c", 5, 0),
        ])],
    );
    g.named(
        "touch and gat",
        vec![packets(vec![
            set(SET, b"k", b"v", 0, 1, 0),
            bin_request(TOUCH, b"k", &100u32.to_be_bytes(), b"", 2, 0),
            bin_request(GAT, b"k", &100u32.to_be_bytes(), b"", 3, 0),
            bin_request(TOUCH, b"z", &100u32.to_be_bytes(), b"", 4, 0),
        ])],
    );
    g.named(
        "flush",
        vec![packets(vec![
            set(SET, b"k", b"v", 0, 1, 0),
            bin_request(FLUSH, b"", b"", b"", 2, 0),
            simple(GET, b"k", 3),
        ])],
    );
    g.named("version", vec![packets(vec![simple(VERSION, b"", 1)])]);
    g.named(
        "unknown opcode",
        // Without a body: memcached 1.6.18 swallows an unknown command's body twice, eating
        // into the next request.
        vec![packets(vec![simple(0x55, b"", 1)])],
    );
    g.named(
        "key too long",
        vec![packets(vec![simple(GET, &[b'k'; 251], 1)])],
    );
    g.named(
        "quit answers, then closes",
        vec![packets(vec![set(SET, b"k", b"v", 0, 1, 0), simple(QUIT, b"", 2)]).closes()],
    );
    g.named(
        "quitq closes silently",
        vec![packets(vec![simple(QUITQ, b"", 1)]).closes()],
    );
    g.cases
}
