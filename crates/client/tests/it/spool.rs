//! The delete spool's promises, made deterministic: a server that is owed spooled deletes
//! serves no read until they are replayed (a read queued before the replay's deletes
//! would return the deleted value), and the default spool directory is a locked slot.

use memfleet_client::{
    BackendError, RequestClass, RequestForm, RouteContext, RouteRequest, Topology,
};
use memfleet_routing::from_toml;
use memfleet_server::{Server, Settings};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn server() -> (Server, u16) {
    let s = Server::start(Settings::single_worker(0, 16 << 20)).expect("server starts");
    let port = s.local_addr().port();
    (s, port)
}

fn direct(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn get(key: &str) -> RouteRequest {
    RouteRequest {
        class: RequestClass::Get,
        key: key.as_bytes().to_vec(),
        form: RequestForm::Get {
            head: b"get".to_vec(),
        },
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("memfleet-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

// One thread: the replay task that opening the spool starts cannot run before the read
// below is sent, unless the read waits for it.
#[tokio::test(flavor = "current_thread")]
async fn a_server_owed_spooled_deletes_serves_no_read_before_their_replay() {
    let (_server, port) = server();
    assert_eq!(direct(port, "set k 0 0 5\r\nstale\r\n"), "STORED\r\n");
    // A spool an earlier run left: the delete of k, never delivered.
    let spool = scratch("spool-hold");
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::write(
        spool.join(format!("main--127.0.0.1-{port}.spool")),
        b"delete k\r\n",
    )
    .unwrap();
    let config = from_toml(&format!(
        "[router]\nspool_dir = \"{}\"\n[pools.main]\nservers = [\"127.0.0.1:{port}\"]\n",
        spool.display()
    ))
    .unwrap();
    let topology = Topology::build(&config, None).unwrap();
    let route = topology.route("main").unwrap();
    let ctx = RouteContext { lane: 0, client: 0 };
    // Sent now, before the replay could send its delete: it must not be answered by the
    // server (which still holds the value the spool deletes).
    match route.call(get("k"), ctx).await {
        Err(BackendError::Replaying(_)) => {}
        other => panic!("a read went to a server owed a delete: {other:?}"),
    }
    // The replay lands; then reads go to the server again, and miss.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match route.call(get("k"), ctx).await {
            Ok(reply) => {
                assert_eq!(reply, b"END\r\n", "the deleted value after the replay");
                break;
            }
            Err(BackendError::Replaying(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let queues = topology.spool_stats();
    assert_eq!(queues.len(), 1);
    assert_eq!((queues[0].depth, queues[0].delivered), (0, 1));
    drop(topology);
    let _ = std::fs::remove_dir_all(&spool);
}

#[tokio::test(flavor = "current_thread")]
async fn the_default_spool_is_a_private_slot_each_topology_holds_alone() {
    let (_server, port) = server();
    let state = scratch("spool-state");
    // The other test of this binary names its spool_dir: only this one reads the
    // variable it sets.
    let config = from_toml(&format!("[pools.main]\nservers = [\"127.0.0.1:{port}\"]\n")).unwrap();
    let with_state = |f: &dyn Fn() -> Topology| {
        let before = std::env::var_os("MEMFLEET_STATE_DIR");
        std::env::set_var("MEMFLEET_STATE_DIR", &state);
        let t = f();
        match before {
            Some(v) => std::env::set_var("MEMFLEET_STATE_DIR", v),
            None => std::env::remove_var("MEMFLEET_STATE_DIR"),
        }
        t
    };
    let first = with_state(&|| Topology::build(&config, None).unwrap());
    let second = with_state(&|| Topology::build(&config, None).unwrap());
    assert_eq!(first.spool_dir(), Some(state.join("spool/0").as_path()));
    assert_eq!(second.spool_dir(), Some(state.join("spool/1").as_path()));
    use std::os::unix::fs::PermissionsExt;
    for dir in ["spool", "spool/0", "spool/1"] {
        let mode = std::fs::metadata(state.join(dir))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{dir}");
    }
    // A slot is free again once its holder is gone (a restarted process resumes it).
    drop(first);
    let third = with_state(&|| Topology::build(&config, None).unwrap());
    assert_eq!(third.spool_dir(), Some(state.join("spool/0").as_path()));
    // Spooling turned off: no directory at all.
    let off = from_toml(&format!(
        "[pools.main]\nservers = [\"127.0.0.1:{port}\"]\nspool_deletes = false\n"
    ))
    .unwrap();
    assert_eq!(Topology::build(&off, None).unwrap().spool_dir(), None);
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_flushes_and_keep_every_delete() {
    use memfleet_client::spool::Spooler;
    use memfleet_client::{Backend, BackendOptions};
    let dir = scratch("spool-group");
    let spooler = Spooler::new(&dir).unwrap();
    // Nothing listens there: every delete stays queued.
    let port = memfleet_testkit::free_port();
    let backend = Backend::new(
        ([127, 0, 0, 1], port).into(),
        format!("127.0.0.1:{port}"),
        BackendOptions {
            connections: 1,
            timeout: Duration::from_millis(100),
            failure_limit: 1,
            retry: Duration::from_secs(30),
            tls: None,
            auth: None,
            eject: false,
            outstanding: None,
        },
    );
    let queue = spooler.queue("main", &backend);
    let appends: Vec<_> = (0..500)
        .map(|i| {
            let q = queue.clone();
            tokio::spawn(async move { q.append(format!("delete k{i}\r\n").into_bytes()).await })
        })
        .collect();
    for a in appends {
        a.await.unwrap().expect("appended and flushed");
    }
    assert_eq!(queue.depth(), 500);
    let text = std::fs::read_to_string(dir.join(format!("main--127.0.0.1-{port}.spool"))).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    let mut want: Vec<String> = (0..500).map(|i| format!("delete k{i}")).collect();
    want.sort_unstable();
    assert_eq!(lines, want);
    let _ = std::fs::remove_dir_all(&dir);
}
