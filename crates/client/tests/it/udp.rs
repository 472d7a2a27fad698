//! UDP gets against a real `memfleet server -U`, through a relay that can drop or reorder
//! reply datagrams: whole replies are hits, a dropped or reordered datagram is a miss that
//! the look-aside helper does not fill, and a reply too large for UDP comes over TCP.

use memfleet_client::{Client, ClientOptions, UdpGet};
use memfleet_routing::from_toml;
use memfleet_server::{Server, Settings};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy)]
enum Fault {
    None,
    /// Drop every n-th reply datagram.
    DropEvery(usize),
    /// Send the second datagram of a multi-datagram reply before the first.
    SwapFirstTwo,
}

/// A UDP relay from `listen` to `server`, applying `fault` to what comes back.
fn relay(listen: UdpSocket, server: SocketAddr, fault: Fault) {
    let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
    let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
    let (listen2, upstream2, client2) = (
        listen.try_clone().unwrap(),
        upstream.try_clone().unwrap(),
        client.clone(),
    );
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = listen.recv_from(&mut buf) {
            *client.lock().unwrap() = Some(from);
            let _ = upstream.send_to(&buf[..n], server);
        }
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        let mut seen = 0usize;
        let mut held: Option<Vec<u8>> = None;
        while let Ok(n) = upstream2.recv(&mut buf) {
            let Some(to) = *client2.lock().unwrap() else {
                continue;
            };
            seen += 1;
            let datagram = buf[..n].to_vec();
            let (sequence, count) = (
                u16::from_be_bytes([buf[2], buf[3]]),
                u16::from_be_bytes([buf[4], buf[5]]),
            );
            match fault {
                Fault::None => {}
                Fault::DropEvery(k) => {
                    if seen.is_multiple_of(k) {
                        continue;
                    }
                }
                Fault::SwapFirstTwo if count > 1 && sequence == 0 => {
                    held = Some(datagram);
                    continue;
                }
                Fault::SwapFirstTwo => {
                    let _ = listen2.send_to(&datagram, to);
                    if let Some(first) = held.take() {
                        let _ = listen2.send_to(&first, to);
                    }
                    continue;
                }
            }
            let _ = listen2.send_to(&datagram, to);
        }
    });
}

/// A server with UDP on, and a client whose UDP gets reach it through a relay with
/// `fault` (the relay listens on UDP at the server's TCP port number, where the client
/// sends, as to a memcached started with -U equal to -p).
fn setup(fault: Fault) -> (Server, Client, u16) {
    let udp_port = memfleet_testkit::free_port();
    let server = Server::start({
        let mut settings = Settings::single_worker(0, 16 << 20);
        settings.listen.udp_port = Some(udp_port);
        settings
    })
    .expect("server starts");
    let port = server.local_addr().port();
    let listen = UdpSocket::bind(("127.0.0.1", port)).expect("the UDP port of the TCP number");
    relay(listen, SocketAddr::from(([127, 0, 0, 1], udp_port)), fault);
    let config = from_toml(&format!("[pools.main]\nservers = [\"127.0.0.1:{port}\"]\n")).unwrap();
    let client = Client::new(
        &config,
        "main",
        ClientOptions {
            udp: Some(Duration::from_millis(200)),
            compress_above: None,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    (server, client, port)
}

#[tokio::test]
async fn whole_replies_are_hits_even_across_datagrams() {
    let (_s, cache, _) = setup(Fault::None);
    let big: Vec<u8> = (0..6000u32).map(|i| b'a' + (i % 26) as u8).collect();
    cache.set("small", b"v", 0).await.unwrap();
    cache.set("big", &big, 0).await.unwrap();
    assert_eq!(
        cache.get_udp("small").await.unwrap(),
        UdpGet::Hit(memfleet_client::Value {
            data: b"v".to_vec(),
            flags: 0,
            cas: None
        })
    );
    let UdpGet::Hit(v) = cache.get_udp("big").await.unwrap() else {
        panic!("big value lost");
    };
    assert_eq!(v.data, big);
    assert_eq!(cache.get_udp("absent").await.unwrap(), UdpGet::Miss);
    let c = cache.udp_counters().unwrap();
    assert_eq!(c.sent.load(Ordering::Relaxed), 3);
    assert_eq!(c.complete.load(Ordering::Relaxed), 3);
    // A reply too large for UDP (the server refuses it) comes over TCP instead.
    let huge = vec![b'h'; 100 * 1024];
    cache.set("huge", &huge, 0).await.unwrap();
    assert_eq!(cache.get("huge").await.unwrap().unwrap().data, huge);
}

#[tokio::test]
async fn dropped_datagrams_are_misses_that_are_not_filled() {
    let (_s, cache, _) = setup(Fault::DropEvery(2));
    let big: Vec<u8> = vec![b'x'; 5000]; // four datagrams: one is always dropped
    cache.set("big", &big, 0).await.unwrap();
    assert_eq!(cache.get_udp("big").await.unwrap(), UdpGet::Lost);
    assert_eq!(
        cache.get("big").await.unwrap(),
        None,
        "a lost get is a miss"
    );
    // A gap in the sequence is seen at once (the next datagram is out of order); a
    // drop of the last one only by the timeout.
    let c = cache.udp_counters().unwrap();
    let lost = c.dropped.load(Ordering::Relaxed) + c.reordered.load(Ordering::Relaxed);
    assert_eq!(lost, 2);
    // The look-aside helper loads after a loss but does not fill: the server may be
    // overloaded, and the value is still there anyway.
    let loads = AtomicUsize::new(0);
    let got = cache
        .get_or_fill("big", 60, || {
            loads.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::io::Error>(b"from the database".to_vec()) }
        })
        .await
        .unwrap();
    assert_eq!(
        (got.as_slice(), loads.load(Ordering::SeqCst)),
        (&b"from the database"[..], 1)
    );
    // Over TCP (a lease-get) the cached value is untouched.
    let memfleet_client::Lease::Hit(v) = cache.lease_get("big").await.unwrap() else {
        panic!("the value was replaced");
    };
    assert_eq!(v.data, big);
}

#[tokio::test]
async fn reordered_datagrams_are_misses() {
    let (_s, cache, _) = setup(Fault::SwapFirstTwo);
    let big: Vec<u8> = vec![b'r'; 3000];
    cache.set("big", &big, 0).await.unwrap();
    cache.set("small", b"s", 0).await.unwrap();
    assert_eq!(cache.get_udp("big").await.unwrap(), UdpGet::Lost);
    assert_eq!(
        cache
            .udp_counters()
            .unwrap()
            .reordered
            .load(Ordering::Relaxed),
        1
    );
    // Single-datagram replies cannot be reordered.
    assert!(matches!(
        cache.get_udp("small").await.unwrap(),
        UdpGet::Hit(_)
    ));
}
