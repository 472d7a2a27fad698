//! Response encoders against reply bytes captured from memcached 1.6.18, and request
//! encoding for each command.
//!
//! Not here: parsing (`parse.rs`), random round trips (`props.rs`).

use memfleet_protocol::response::{self, MetaDebug, MetaStatus, MetaWriter, Status};
use memfleet_protocol::{parse, MetaKey, ParserConfig, Request};

#[test]
fn text_replies() {
    let mut out = Vec::new();
    response::value(&mut out, b"a", 0, b"x", None);
    response::value(
        &mut out,
        b"foo",
        4294967295,
        b"",
        Some(18446744073709551615),
    );
    response::end(&mut out);
    assert_eq!(
        out,
        b"VALUE a 0 1\r\nx\r\nVALUE foo 4294967295 0 18446744073709551615\r\n\r\nEND\r\n"
    );
    let mut out = Vec::new();
    for s in [
        Status::Stored,
        Status::NotStored,
        Status::Exists,
        Status::NotFound,
        Status::Deleted,
        Status::Touched,
        Status::Ok,
        Status::Reset,
        Status::Error,
    ] {
        response::status(&mut out, s);
    }
    assert_eq!(out, b"STORED\r\nNOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nDELETED\r\nTOUCHED\r\nOK\r\nRESET\r\nERROR\r\n");
    let mut out = Vec::new();
    response::number(&mut out, 18446744073709551615);
    response::version(&mut out, b"1.6.18");
    response::stat(&mut out, b"version", b"1.6.18");
    response::stat_u64(&mut out, b"curr_items", 2);
    response::client_error(&mut out, b"cannot increment or decrement non-numeric value");
    response::server_error(&mut out, b"out of memory storing object");
    response::meta_noop(&mut out);
    assert_eq!(
        out,
        b"18446744073709551615\r\nVERSION 1.6.18\r\nSTAT version 1.6.18\r\nSTAT curr_items 2\r\n\
CLIENT_ERROR cannot increment or decrement non-numeric value\r\nSERVER_ERROR out of memory storing object\r\nMN\r\n"
    );
}

#[test]
fn meta_replies_as_memcached_writes_them() {
    // "mg foo k v s t c f h l O q u P L I" on a 1-byte item, from memcached 1.6.18.
    let mut out = Vec::new();
    let mut w = MetaWriter::new(&mut out, MetaStatus::Va(1));
    w.key(b"foo", false)
        .flag_u64(b's', 1)
        .flag_i64(b't', -1)
        .flag_u64(b'c', 12);
    w.flag_u64(b'f', 0)
        .flag_u64(b'h', 1)
        .flag_u64(b'l', 4)
        .opaque(b"");
    w.finish_with_value(b"x");
    assert_eq!(out, b"VA 1 kfoo s1 t-1 c12 f0 h1 l4 O\r\nx\r\n");
    // "ms Zm9v 1 b k c Oop T0 F5": binary key echoed re-encoded with " b".
    let mut out = Vec::new();
    let mut w = MetaWriter::new(&mut out, MetaStatus::Hd);
    w.key(b"foo", true).flag_u64(b'c', 13).opaque(b"op");
    w.finish();
    assert_eq!(out, b"HD kZm9v b c13 Oop\r\n");
    // "ma foo N0 J5 v t c k Oab" after one increment.
    let mut out = Vec::new();
    let mut w = MetaWriter::new(&mut out, MetaStatus::Va(1));
    w.flag_i64(b't', -1)
        .flag_u64(b'c', 16)
        .key(b"foo", false)
        .opaque(b"ab");
    w.finish_with_value(b"6");
    assert_eq!(out, b"VA 1 t-1 c16 kfoo Oab\r\n6\r\n");
    // Miss echo: O and k only, in request order.
    let cfg = ParserConfig::default();
    let (Request::MetaGet(m), _) = parse(b"mg Zm9v v k Oxy b c\r\n", &cfg).unwrap() else {
        panic!()
    };
    let mut out = Vec::new();
    let mut w = MetaWriter::new(&mut out, MetaStatus::En);
    w.echo(&m.flags, &m.key);
    w.finish();
    assert_eq!(out, b"EN kZm9v b Oxy\r\n");
    for (s, b) in [
        (MetaStatus::Nf, "NF"),
        (MetaStatus::Ns, "NS"),
        (MetaStatus::Ex, "EX"),
        (MetaStatus::Hd, "HD"),
    ] {
        let mut out = Vec::new();
        let mut w = MetaWriter::new(&mut out, s);
        w.flag(b'W');
        w.finish();
        assert_eq!(out, format!("{b} W\r\n").as_bytes());
    }
    // "me foo" on a fresh item.
    let mut out = Vec::new();
    let d = MetaDebug {
        exp: -1,
        last_access: 1,
        cas: 17,
        fetched: false,
        class: 1,
        size: 63,
    };
    response::meta_debug(&mut out, b"foo", false, &d);
    response::meta_debug(&mut out, b"foo", true, &MetaDebug { fetched: true, ..d });
    assert_eq!(out, b"ME foo exp=-1 la=1 cas=17 fetch=no cls=1 size=63\r\nME Zm9v exp=-1 la=1 cas=17 fetch=yes cls=1 size=63\r\n");
    let _ = MetaKey::new(b"x", false);
}

#[test]
fn requests_encode_canonically() {
    let cfg = ParserConfig::default();
    let cases: &[(&[u8], &[u8])] = &[
        (b"get  a   b\r\n", b"get a b\r\n"),
        (b"gats +10 a\r\n", b"gats 10 a\r\n"),
        (
            b"set k 4294967297 0 1 noreply\r\nx\r\n",
            b"set k 1 0 1 noreply\r\nx\r\n",
        ),
        (b"cas k 0 0 1 7 junk\r\nx\r\n", b"cas k 0 0 1 7\r\nx\r\n"),
        (b"delete k 0\r\n", b"delete k\r\n"),
        // A key named `noreply`, with replies: the zero keeps it from reading as the flag.
        (b"delete noreply b\r\n", b"delete noreply 0\r\n"),
        (b"delete noreply\r\n", b"delete noreply noreply\r\n"),
        (b"decr k 3 noreply\r\n", b"decr k 3 noreply\r\n"),
        (b"touch k 5\r\n", b"touch k 5\r\n"),
        (b"flush_all 0 noreply\r\n", b"flush_all noreply\r\n"),
        (b"flush_all -3\r\n", b"flush_all -3\r\n"),
        (b"verbosity 1 noreply\r\n", b"verbosity 1 noreply\r\n"),
        (b"stats  items\r\n", b"stats items\r\n"),
        (b"version x\r\n", b"version\r\n"),
        (b"quit\r\n", b"quit\r\n"),
        (b"mg k  v   Oab\r\n", b"mg k v Oab\r\n"),
        (b"ms k 2 MA T5\r\nab\r\n", b"ms k 2 MA T5\r\nab\r\n"),
        (b"md Zm9v b q\r\n", b"md Zm9v b q\r\n"),
        (b"ma k D5\r\n", b"ma k D5\r\n"),
        (b"mn x\r\n", b"mn\r\n"),
        (b"me Zm9v b\r\n", b"me Zm9v b\r\n"),
        (b"lru_crawler crawl all\r\n", b"lru_crawler crawl all\r\n"),
    ];
    for (input, want) in cases {
        let (req, _) = parse(input, &cfg).unwrap();
        let mut out = Vec::new();
        req.encode(&mut out);
        assert_eq!(
            out.escape_ascii().to_string(),
            want.escape_ascii().to_string()
        );
        assert_eq!(parse(&out, &cfg).unwrap().0, req);
    }
}
