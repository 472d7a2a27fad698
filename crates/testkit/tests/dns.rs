//! The test kit's DNS server, queried through real sockets: by hickory-resolver (the resolver
//! the router's DNS discovery uses) and by hand-made messages for what a resolver hides
//! (truncation, malformed queries, the additional section over TCP).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use hickory_resolver::{Resolver, TokioResolver};
use memfleet_testkit::dns::{DnsServer, Mode, Srv};

/// A resolver that asks `server` only (UDP, then TCP on truncation), caches nothing, and
/// gives up after 300 ms.
fn resolver(server: &DnsServer, edns: bool) -> TokioResolver {
    let addr = server.addr();
    let mut name_server = NameServerConfig::udp_and_tcp(addr.ip());
    for connection in &mut name_server.connections {
        connection.port = addr.port();
    }
    let config = ResolverConfig::from_name_servers(vec![name_server]);
    let mut builder = Resolver::builder_with_config(config, TokioRuntimeProvider::default());
    let options = builder.options_mut();
    options.cache_size = 0;
    options.timeout = Duration::from_millis(300);
    options.attempts = 1;
    options.edns0 = edns;
    builder.build().expect("build the resolver")
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// The answer records of one `rtype` query for `name`.
async fn answers(
    resolver: &TokioResolver,
    name: &str,
    rtype: RecordType,
) -> Result<Vec<Record>, NetError> {
    let lookup = resolver.lookup(name, rtype).await?;
    Ok(lookup.answers().to_vec())
}

fn addrs_of(records: &[Record]) -> BTreeSet<IpAddr> {
    records
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}

/// The response code of a failed lookup ("no records" answers carry theirs).
fn code_of(error: &NetError) -> Option<ResponseCode> {
    match error {
        NetError::Dns(DnsError::NoRecordsFound(none)) => Some(none.response_code),
        NetError::Dns(DnsError::ResponseCode(code)) => Some(*code),
        _ => None,
    }
}

#[tokio::test]
async fn a_records_all_of_them_with_their_ttl_names_case_insensitive() {
    let dns = DnsServer::start();
    let resolver = resolver(&dns, true);
    dns.set_a("Web.Test", &[ip("10.0.0.1")], 30);
    let one = answers(&resolver, "web.test.", RecordType::A)
        .await
        .unwrap();
    assert_eq!(addrs_of(&one), BTreeSet::from([ip("10.0.0.1")]));
    assert_eq!(one[0].ttl, 30);

    let many: Vec<IpAddr> = (1..=7).map(|i| ip(&format!("10.0.1.{i}"))).collect();
    dns.set_a("many.test.", &many, 7);
    let got = answers(&resolver, "MANY.test.", RecordType::A)
        .await
        .unwrap();
    assert_eq!(got.len(), 7);
    assert_eq!(addrs_of(&got), many.iter().copied().collect());
    assert!(got.iter().all(|r| r.ttl == 7), "{got:?}");
    // lookup_ip, as the discovery code calls it.
    let ips: BTreeSet<IpAddr> = resolver
        .lookup_ip("many.test.")
        .await
        .unwrap()
        .iter()
        .collect();
    assert_eq!(ips, many.iter().copied().collect());
    assert!(
        dns.queries_for("many.TEST") >= 2,
        "{}",
        dns.queries_for("many.test")
    );
}

#[tokio::test]
async fn aaaa_records_apart_from_a_and_other_types_of_a_known_name_are_empty() {
    let dns = DnsServer::start();
    let resolver = resolver(&dns, true);
    dns.set_a(
        "dual.test",
        &[ip("10.0.0.2"), ip("fd00::2"), ip("fd00::3")],
        60,
    );
    let v6 = answers(&resolver, "dual.test.", RecordType::AAAA)
        .await
        .unwrap();
    assert_eq!(
        addrs_of(&v6),
        BTreeSet::from([ip("fd00::2"), ip("fd00::3")])
    );
    let v4 = answers(&resolver, "dual.test.", RecordType::A)
        .await
        .unwrap();
    assert_eq!(addrs_of(&v4), BTreeSet::from([ip("10.0.0.2")]));

    dns.set_a("v4only.test", &[ip("10.0.0.3")], 60);
    let error = answers(&resolver, "v4only.test.", RecordType::AAAA)
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), Some(ResponseCode::NoError), "{error}");
    let error = answers(&resolver, "v4only.test.", RecordType::TXT)
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), Some(ResponseCode::NoError), "{error}");
}

#[tokio::test]
async fn srv_records_with_the_targets_addresses_in_the_additional_section() {
    let dns = DnsServer::start();
    let resolver = resolver(&dns, true);
    let service = "_memcache._tcp.mf.default.svc.cluster.local";
    dns.set_srv(
        service,
        &[
            ("mf-0.mf.default.svc.cluster.local", 11211),
            ("mf-1.mf.default.svc.cluster.local.", 11212),
        ],
        15,
    );
    dns.set_a("mf-0.mf.default.svc.cluster.local", &[ip("127.0.0.10")], 5);
    dns.set_a(
        "mf-1.mf.default.svc.cluster.local",
        &[ip("127.0.0.11"), ip("fd00::11")],
        5,
    );

    let lookup = resolver.srv_lookup(format!("{service}.")).await.unwrap();
    let mut srv: Vec<(String, u16, u16, u16, u32)> = lookup
        .answers()
        .iter()
        .map(|r| match &r.data {
            RData::SRV(s) => (s.target.to_ascii(), s.port, s.priority, s.weight, r.ttl),
            other => panic!("not SRV: {other:?}"),
        })
        .collect();
    srv.sort();
    assert_eq!(
        srv,
        vec![
            (
                "mf-0.mf.default.svc.cluster.local.".to_string(),
                11211,
                0,
                1,
                15
            ),
            (
                "mf-1.mf.default.svc.cluster.local.".to_string(),
                11212,
                0,
                1,
                15
            ),
        ]
    );
    let additional = lookup.additionals();
    assert_eq!(
        addrs_of(additional),
        BTreeSet::from([ip("127.0.0.10"), ip("127.0.0.11"), ip("fd00::11")])
    );
    assert!(additional.iter().all(|r| r.ttl == 5), "{additional:?}");

    // A target is an ordinary name too.
    let target = answers(
        &resolver,
        "mf-1.mf.default.svc.cluster.local.",
        RecordType::A,
    )
    .await
    .unwrap();
    assert_eq!(addrs_of(&target), BTreeSet::from([ip("127.0.0.11")]));

    // Priority and weight as given; a target it has no address for has no additional record.
    dns.set_srv_records(
        service,
        &[Srv {
            priority: 3,
            weight: 9,
            port: 7,
            target: "elsewhere.test".into(),
        }],
        20,
    );
    let lookup = resolver.srv_lookup(format!("{service}.")).await.unwrap();
    let RData::SRV(s) = &lookup.answers()[0].data else {
        panic!("not SRV")
    };
    assert_eq!(
        (s.priority, s.weight, s.port, s.target.to_ascii().as_str()),
        (3, 9, 7, "elsewhere.test.")
    );
    assert_eq!(lookup.answers().len(), 1);
    assert!(addrs_of(lookup.additionals()).is_empty());
}

#[tokio::test]
async fn zone_changes_are_seen_by_the_next_lookup_and_unknown_names_are_nxdomain() {
    let dns = DnsServer::start();
    let resolver = resolver(&dns, true);
    let error = answers(&resolver, "nobody.test.", RecordType::A)
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), Some(ResponseCode::NXDomain), "{error}");

    dns.set_a("moving.test", &[ip("10.0.0.1")], 1);
    assert_eq!(
        addrs_of(
            &answers(&resolver, "moving.test.", RecordType::A)
                .await
                .unwrap()
        ),
        BTreeSet::from([ip("10.0.0.1")])
    );
    dns.set_a("moving.test", &[ip("10.0.0.2"), ip("10.0.0.3")], 1);
    assert_eq!(
        addrs_of(
            &answers(&resolver, "moving.test.", RecordType::A)
                .await
                .unwrap()
        ),
        BTreeSet::from([ip("10.0.0.2"), ip("10.0.0.3")])
    );
    // Known with no addresses: NOERROR, empty; removed: NXDOMAIN.
    dns.set_a("moving.test", &[], 1);
    let error = answers(&resolver, "moving.test.", RecordType::A)
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), Some(ResponseCode::NoError), "{error}");
    dns.remove("moving.test.");
    let error = answers(&resolver, "moving.test.", RecordType::A)
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), Some(ResponseCode::NXDomain), "{error}");

    // SRV members come and go.
    dns.set_srv("_m._tcp.pool.test", &[("a.test", 1)], 1);
    dns.set_srv("_m._tcp.pool.test", &[("a.test", 1), ("b.test", 2)], 1);
    assert_eq!(
        resolver
            .srv_lookup("_m._tcp.pool.test.")
            .await
            .unwrap()
            .answers()
            .len(),
        2
    );
}

#[tokio::test]
async fn modes_empty_servfail_nxdomain_then_answers_again() {
    let dns = DnsServer::start();
    let resolver = resolver(&dns, true);
    dns.set_a("m.test", &[ip("10.0.0.1")], 5);
    dns.set_srv("_m._tcp.m.test", &[("m.test", 11211)], 5);

    dns.set_mode(Mode::Empty);
    for (name, rtype) in [
        ("m.test.", RecordType::A),
        ("_m._tcp.m.test.", RecordType::SRV),
        ("nobody.test.", RecordType::A),
    ] {
        let error = answers(&resolver, name, rtype).await.unwrap_err();
        assert_eq!(
            code_of(&error),
            Some(ResponseCode::NoError),
            "{name}: {error}"
        );
    }
    dns.set_mode(Mode::ServFail);
    let error = answers(&resolver, "m.test.", RecordType::A)
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), Some(ResponseCode::ServFail), "{error}");
    dns.set_mode(Mode::NxDomain);
    let error = resolver.srv_lookup("_m._tcp.m.test.").await.unwrap_err();
    assert_eq!(code_of(&error), Some(ResponseCode::NXDomain), "{error}");

    dns.set_mode(Mode::Answer);
    assert_eq!(
        addrs_of(&answers(&resolver, "m.test.", RecordType::A).await.unwrap()),
        BTreeSet::from([ip("10.0.0.1")])
    );
}

#[tokio::test]
async fn down_drops_every_query_so_lookups_time_out_and_it_counts_them() {
    let dns = DnsServer::start();
    let resolver = resolver(&dns, true);
    dns.set_a("d.test", &[ip("10.0.0.1")], 5);
    dns.set_mode(Mode::Down);
    let before = dns.queries();
    let started = Instant::now();
    let error = answers(&resolver, "d.test.", RecordType::A)
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(code_of(&error).is_none(), "an answer came: {error}");
    assert!(
        waited >= Duration::from_millis(250),
        "failed in {waited:?} (not a timeout): {error}"
    );
    assert!(dns.queries() > before, "the dropped query was not counted");
    // Over TCP too: nothing comes back.
    let mut stream = TcpStream::connect(dns.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    stream
        .write_all(&framed(&query("d.test.", RecordType::A, None)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(
        stream.read(&mut byte).is_err(),
        "a TCP answer came from a server that is down"
    );

    dns.set_mode(Mode::Answer);
    assert_eq!(
        addrs_of(&answers(&resolver, "d.test.", RecordType::A).await.unwrap()),
        BTreeSet::from([ip("10.0.0.1")])
    );
}

#[tokio::test]
async fn an_answer_too_big_for_udp_arrives_over_tcp() {
    let dns = DnsServer::start();
    let sixty: Vec<IpAddr> = (0..60u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(10, 1, 0, i)))
        .collect();
    dns.set_a("big.test", &sixty, 5);
    // Without EDNS a UDP answer holds 512 bytes: 60 A records (~1 KB) need TCP.
    let got = answers(&resolver(&dns, false), "big.test.", RecordType::A)
        .await
        .unwrap();
    assert_eq!(addrs_of(&got), sixty.iter().copied().collect());
    assert_eq!(dns.tcp_queries(), 1);
    // With EDNS (1232 bytes by default) 60 fit in UDP; 100 do not.
    let resolver = resolver(&dns, true);
    assert_eq!(
        answers(&resolver, "big.test.", RecordType::A)
            .await
            .unwrap()
            .len(),
        60
    );
    assert_eq!(dns.tcp_queries(), 1);
    let hundred: Vec<IpAddr> = (0..100u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(10, 2, 0, i)))
        .collect();
    dns.set_a("big.test", &hundred, 5);
    assert_eq!(
        addrs_of(
            &answers(&resolver, "big.test.", RecordType::A)
                .await
                .unwrap()
        ),
        hundred.iter().copied().collect()
    );
    assert_eq!(dns.tcp_queries(), 2);
}

/// A query message for `name`, with an EDNS payload size when given.
fn query(name: &str, rtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut message = Message::new(0x1234, MessageType::Query, OpCode::Query);
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    if let Some(size) = edns {
        let mut opt = Edns::new();
        opt.set_max_payload(size);
        message.set_edns(opt);
    }
    message.to_vec().unwrap()
}

fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = u16::try_from(message.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(message);
    out
}

fn udp_exchange(server: SocketAddr, datagram: &[u8]) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    socket.send_to(datagram, server).unwrap();
    let mut buf = [0u8; 65536];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    Some(Message::from_vec(&buf[..n]).expect("a well-formed answer"))
}

fn tcp_exchange(stream: &mut TcpStream, message: &[u8]) -> Message {
    stream.write_all(&framed(message)).unwrap();
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).unwrap();
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut answer).unwrap();
    Message::from_vec(&answer).unwrap()
}

/// What a resolver hides: the TC bit, additionals dropped before answers, malformed input.
/// A plain `#[test]`: the server needs no runtime.
#[test]
fn truncation_additionals_and_malformed_queries_by_hand() {
    let dns = DnsServer::start();
    let targets: Vec<String> = (0..12).map(|i| format!("member-{i}.pool.test")).collect();
    for (i, target) in targets.iter().enumerate() {
        dns.set_a(
            target,
            &[IpAddr::V6(Ipv6Addr::new(
                0xfd00, 0, 0, 0, 0, 0, 0, i as u16,
            ))],
            5,
        );
    }
    let pairs: Vec<(&str, u16)> = targets.iter().map(|t| (t.as_str(), 11211)).collect();
    dns.set_srv("_m._tcp.pool.test", &pairs, 5);

    // 12 SRV records fit in 512 bytes, their 12 AAAA records do not: the additionals go.
    let answer = udp_exchange(
        dns.addr(),
        &query("_m._tcp.pool.test.", RecordType::SRV, None),
    )
    .unwrap();
    assert!(!answer.metadata.truncation);
    assert_eq!((answer.answers.len(), answer.additionals.len()), (12, 0));
    assert_eq!(answer.metadata.id, 0x1234);
    assert!(answer.metadata.authoritative);
    // With EDNS room, or over TCP, they stay.
    let answer = udp_exchange(
        dns.addr(),
        &query("_m._tcp.pool.test.", RecordType::SRV, Some(4096)),
    )
    .unwrap();
    assert_eq!((answer.answers.len(), answer.additionals.len()), (12, 12));
    let mut stream = TcpStream::connect(dns.addr()).unwrap();
    let answer = tcp_exchange(
        &mut stream,
        &query("_m._tcp.pool.test.", RecordType::SRV, None),
    );
    assert_eq!((answer.answers.len(), answer.additionals.len()), (12, 12));

    // Too many answers for 512 bytes: TC set, no records, the question echoed.
    let many: Vec<IpAddr> = (0..60u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(10, 3, 0, i)))
        .collect();
    dns.set_a("big.test", &many, 5);
    let answer = udp_exchange(dns.addr(), &query("big.test.", RecordType::A, None)).unwrap();
    assert!(answer.metadata.truncation);
    assert!(answer.answers.is_empty());
    assert_eq!(answer.queries[0].name().to_ascii(), "big.test.");
    let answer = tcp_exchange(&mut stream, &query("big.test.", RecordType::A, None));
    assert!(!answer.metadata.truncation);
    assert_eq!(answer.answers.len(), 60);

    // Garbage, a response and a question-less message are ignored, not counted; it still
    // answers. One socket, one serving thread: the first datagram back answers the good query.
    let before = dns.queries();
    let mut response = Message::new(1, MessageType::Response, OpCode::Query);
    response.add_query(Query::query(
        Name::from_ascii("big.test.").unwrap(),
        RecordType::A,
    ));
    let response = response.to_vec().unwrap();
    let empty = Message::new(2, MessageType::Query, OpCode::Query)
        .to_vec()
        .unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for bad in [
        &[0xff; 3][..],
        &[0; 40],
        &response,
        &empty,
        &[],
        &response[..20],
    ] {
        socket.send_to(bad, dns.addr()).unwrap();
    }
    socket
        .send_to(&query("big.test.", RecordType::A, Some(4096)), dns.addr())
        .unwrap();
    let mut buf = [0u8; 65536];
    let n = socket.recv(&mut buf).unwrap();
    let first = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(
        (first.metadata.id, first.answers.len()),
        (0x1234, 60),
        "the first answer is not the good query's"
    );
    // Over TCP: a frame of garbage and a response, then a query on the same connection.
    stream.write_all(&framed(&[0xff; 17])).unwrap();
    stream.write_all(&framed(&response)).unwrap();
    let mut half = TcpStream::connect(dns.addr()).unwrap();
    half.write_all(&[0x00]).unwrap(); // half a length, then closed
    drop(half);
    let answer = tcp_exchange(&mut stream, &query("BIG.test.", RecordType::A, None));
    assert_eq!(answer.answers.len(), 60);
    assert_eq!(
        answer.answers[0].name.to_ascii(),
        "BIG.test.",
        "the owner name as asked"
    );
    assert_eq!(dns.queries(), before + 2);
    assert_eq!(dns.queries_for("big.test"), 4);
}

#[test]
fn dropped_it_stops_listening() {
    let dns = DnsServer::start();
    let addr = dns.addr();
    dns.set_a("x.test", &[ip("10.0.0.1")], 5);
    assert!(udp_exchange(addr, &query("x.test.", RecordType::A, None)).is_some());
    let started = Instant::now();
    drop(dns);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "drop took {:?}",
        started.elapsed()
    );
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting on {addr}"
    );
    assert!(udp_exchange(addr, &query("x.test.", RecordType::A, None)).is_none());
}
