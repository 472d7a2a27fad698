//! A listener's `workers` (which router workers serve its clients), through a real `memfleet
//! router -t 3` in front of a real `memfleet server`: each listener's clients land on its
//! own workers (the admin key `__memfleet__.worker` says which), are served there end to
//! end, a reload moves new clients and leaves connected ones where they are, and a worker
//! the router does not run is refused at start, on reload and by `--validate-config -t N`.

use crate::support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, memfleet_server, until_serving, Conn, Killed};

/// What this module asks of a text connection beyond `support::Conn`'s own.
trait ConnExt {
    fn worker(&mut self) -> usize;
}

impl ConnExt for Conn {
    /// The worker serving this connection (`get __memfleet__.worker`).
    fn worker(&mut self) -> usize {
        let head = self.line("get __memfleet__.worker\r\n");
        assert!(head.starts_with("VALUE __memfleet__.worker 0 "), "{head}");
        let value = self.read_line();
        assert_eq!(self.read_line(), "END\r\n");
        value.trim_end().parse().unwrap()
    }
}

/// Workers of `n` new clients of `port`, in the order they connected (kept open, so that
/// none of them is reused), and the clients.
fn placed(port: u16, n: usize) -> (Vec<usize>, Vec<Conn>) {
    let mut clients: Vec<Conn> = (0..n).map(|_| Conn::new(port)).collect();
    (clients.iter_mut().map(Conn::worker).collect(), clients)
}

fn config(server: u16, [a, b, c, d]: [u16; 4], a_workers: &str) -> String {
    format!(
        "[pools.a]\nlisten = \"127.0.0.1:{a}\"\nworkers = {a_workers}\n\
         servers = [\"127.0.0.1:{server}\"]\n\
         [pools.b]\nlisten = \"127.0.0.1:{b}\"\nworkers = [0, 1]\n\
         servers = [\"127.0.0.1:{server}\"]\n\
         [pools.d]\nlisten = \"127.0.0.1:{d}\"\nservers = [\"127.0.0.1:{server}\"]\n\
         [routes.c]\nlisten = \"127.0.0.1:{c}\"\ntype = \"operation\"\ndefault = \"a\"\n\
         workers = [1]\n"
    )
}

#[test]
fn a_listeners_workers_serve_its_clients_and_a_reload_moves_only_new_ones() {
    let (_s, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(server);
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let [a, b, c, d] = ports;
    let dir = std::env::temp_dir();
    let file = dir.join(format!("memfleet-workers-{}.toml", std::process::id()));
    let log = dir.join(format!("memfleet-workers-{}.log", std::process::id()));
    std::fs::write(&file, config(server, ports, "[2]")).unwrap();
    let _router = Killed(
        Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .args(["router", "-t", "3", "--config"])
            .arg(&file)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    for port in ports {
        until_serving(port);
    }

    // Pool a: worker 2 only, and served there end to end.
    let (workers, mut clients) = placed(a, 6);
    assert_eq!(workers, vec![2; 6]);
    for (i, client) in clients.iter_mut().enumerate() {
        let set = format!("set k{i} 0 0 2\r\nv{i}\r\n");
        assert_eq!(client.line(&set), "STORED\r\n");
        assert_eq!(
            client.line(format!("get k{i}\r\n")),
            format!("VALUE k{i} 0 2\r\n")
        );
        assert_eq!(client.read_line(), format!("v{i}\r\n"));
        assert_eq!(client.read_line(), "END\r\n");
    }
    // Pool b: workers 0 and 1 in turn.
    let (workers, _b_clients) = placed(b, 6);
    assert!(workers.iter().all(|w| *w < 2), "{workers:?}");
    assert!(
        workers.windows(2).all(|p| p[0] != p[1]),
        "in turn: {workers:?}"
    );
    // Route c: worker 1, and its requests reach a's server.
    let (workers, mut c_clients) = placed(c, 3);
    assert_eq!(workers, vec![1; 3]);
    assert_eq!(c_clients[0].line("get k0\r\n"), "VALUE k0 0 2\r\n");
    // Pool d names none: every worker in turn.
    let (mut workers, _d_clients) = placed(d, 6);
    workers.sort_unstable();
    workers.dedup();
    assert_eq!(workers, vec![0, 1, 2]);

    // A reload moves a's new clients to worker 0; a client already in stays on 2.
    std::fs::write(&file, config(server, ports, "[0]")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Conn::new(a).worker() != 0 {
        assert!(
            Instant::now() < deadline,
            "the reload never moved new clients"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(placed(a, 4).0, vec![0; 4]);
    assert_eq!(clients[0].worker(), 2);
    assert_eq!(clients[0].line("get k1\r\n"), "VALUE k1 0 2\r\n");

    // A worker the router does not run: the reload is refused, the old one serves on.
    std::fs::write(&file, config(server, ports, "[3]")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("reload refused") {
            assert!(
                text.contains(
                    "a: workers = [3] names worker 3, but the router runs 3 (-t 3): \
                     workers are numbered 0 to 2"
                ),
                "{text}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no refusal logged: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(placed(a, 2).0, vec![0; 2]);
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(log);
}

#[test]
fn workers_the_router_does_not_run_are_refused_at_start_and_by_validate_config() {
    let port = free_port();
    let file =
        std::env::temp_dir().join(format!("memfleet-workers-bad-{}.toml", std::process::id()));
    let write = |text: &str| {
        std::fs::File::create(&file)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap()
    };
    write(&format!(
        "[pools.p]\nlisten = \"127.0.0.1:{port}\"\nworkers = [0, 2]\nservers = [\"127.0.0.1:1\"]\n"
    ));
    let router = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .arg("router")
            .args(args)
            .arg("--config")
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let problem = "p: workers = [0, 2] names worker 2, but the router runs 2 (-t 2)";
    let (code, err) = router(&["-t", "2"]);
    assert_ne!(code, Some(0));
    assert!(err.contains(problem), "{err}");
    let validate = |threads: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_memfleet"));
        c.arg("router").arg("--validate-config").arg(&file);
        if let Some(t) = threads {
            c.args(["-t", t]);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = validate(Some("2"));
    assert_ne!(code, Some(0));
    assert!(err.contains(problem), "{err}");
    assert_eq!(validate(Some("3")).0, Some(0), "three workers run 0 to 2");
    assert_eq!(
        validate(None).0,
        Some(0),
        "without -t N the count is not known"
    );

    // What a list itself may not say.
    for (workers, says) in [
        ("[]", "workers = [] would serve no client"),
        ("[1, 1]", "workers: 1 is named twice"),
        ("[64]", "workers: 64 is no worker number (0 to 63)"),
    ] {
        write(&format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\nworkers = {workers}\nservers = [\"127.0.0.1:1\"]\n"
        ));
        let (code, err) = validate(None);
        assert_ne!(code, Some(0), "{workers}");
        assert!(err.contains(says), "{workers}: {err}");
    }
    write("[pools.p]\nworkers = [0]\nservers = [\"127.0.0.1:1\"]\n[routes.r]\nlisten = \"127.0.0.1:1\"\ntype = \"operation\"\ndefault = \"p\"\n");
    let (code, err) = validate(None);
    assert_ne!(code, Some(0));
    assert!(
        err.contains(
            "pool p: workers picks the router workers of the listener's clients: it needs listen"
        ),
        "{err}"
    );
    let _ = std::fs::remove_file(file);
}
