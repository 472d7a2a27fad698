//! The Helm chart's pods on a real engine: `podman kube play` (Debian's podman 4.3) runs the
//! pods `helm template` renders for three servers and a router; a client on this machine
//! uses the cache through the router.
//!
//! Values for the test: 3 server replicas with `-m 16`, one router, the image
//! `localhost/memfleet:latest` (`pullPolicy: Never`), `resolveInterval` 1 s,
//! `router.nameservers` = the test's DNS server. podman 4.3 has no StatefulSet: its template
//! is played as the Pods `<fullname>-0`, `-1`, `-2` (the StatefulSet's names), the router
//! Deployment's as `<fullname>-router-0`, with its ConfigMap. The templates stay as rendered
//! but for what podman 4.3 needs, per pod:
//! - each `emptyDir` volume is renamed `<pod>-<volume>` (and its mounts): podman makes an
//!   emptyDir a volume named after the volume, shared by every pod that names it (two servers
//!   on one memory file: the second refuses). `medium: Memory` and `sizeLimit` stay: podman
//!   ignores them (the volume, so the memory file, is on disk);
//! - the probes are removed: podman ignores `startupProbe` and makes a liveness probe a
//!   healthcheck run by a systemd timer (PID 1 is not systemd here) with `curl` in the
//!   container (the image is `FROM scratch`); the test checks readiness by connecting;
//! - the servers' `ports` are removed, the router keeps `memcache` only, with `hostIP:
//!   127.0.0.1` and a free `hostPort`: podman 4.3 publishes every `containerPort` on 0.0.0.0
//!   of the host (three servers would collide on 11211, the cache open on every interface).
//!   The servers are reached, as in a cluster, at their pods' addresses;
//! - annotations with values over 63 characters are dropped: podman 4.3 refuses them (a
//!   label's limit; Kubernetes allows 256 KiB): the router's `checksum/config`, a sha256 that
//!   only makes a Deployment roll when its ConfigMap changes;
//! - no template may use `$(VAR)` (podman does not expand it): asserted.
//!
//! podman ignores `terminationGracePeriodSeconds`: the test gives it to `podman pod rm -t`.
//! A container is restarted in place as the kubelet does after an image patch: SIGTERM
//! (`podman kill`), then the pod's `restartPolicy: Always` starts it again in the same pod.
//! Not `podman restart`: podman 4.3 plays pods with exit policy `stop`, which stops the infra
//! container (network namespace, address) once the last container stops; that races the
//! restart (`runc create failed: ... /proc/<pid>/ns/ipc: no such file`), or moves the pod.
//! The pods are on a podman network of the test's; its aardvark-dns answers no SRV, so the
//! test runs [`DnsServer`] on the network's gateway with what Kubernetes' DNS publishes for
//! the headless Service: SRV `_memcache._tcp.<fullname>.<namespace>.svc.cluster.local` and
//! an A record per pod.
//!
//! Shown: keys filled through the router's port on 127.0.0.1 read back; a server container
//! restarted in place comes back with ≥ 99% of its items (`curr_items`, and its keys through
//! the router); a server pod replaced (played again: empty, a new address under the same
//! name, its A record updated) is followed by the router within a few intervals, no key
//! changes owner, the other pods' keys still hit, the replaced pod's keys store again.
//!
//! All it makes is named `kp<pid><random>-...`, removed at the end, also on failure; it
//! touches nothing else. `#[ignore]`d: it needs podman (root; `CONTAINERS_CONF` is
//! deploy/container/containers.conf unless set), the image (`scripts/build-image`) and helm
//! with PyYAML (`scripts/tools/chart-tools`): `scripts/check-kube-play` prepares and runs it.

use memfleet_testkit::dns::DnsServer;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const IMAGE: &str = "localhost/memfleet:latest";
const NAMESPACE: &str = "cache";
const KEYS: usize = 3000;
const NAME: &str = "{{.Name}}";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs `program args`: its stdout and stderr, or why it failed.
fn run(program: impl AsRef<Path>, args: &[&str]) -> Result<(String, String), String> {
    let shown = format!("{} {}", program.as_ref().display(), args.join(" "));
    let out = Command::new(program.as_ref()).args(args).output();
    let out = out.map_err(|e| format!("{shown}: {e}"))?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    match out.status.success() {
        true => Ok((stdout, stderr)),
        false => Err(format!("{shown}: {}: {stderr}", out.status)),
    }
}

fn podman(args: &[&str]) -> Result<String, String> {
    run("podman", args).map(|(stdout, _)| stdout)
}

fn must(args: &[&str]) -> String {
    podman(args).unwrap_or_else(|e| panic!("{e}"))
}

/// `podman <kind> inspect <name> --format <format>`.
fn field(kind: &str, name: &str, format: &str) -> String {
    must(&[kind, "inspect", name, "--format", format])
}

fn must_json(args: &[&str]) -> Value {
    serde_json::from_str(&must(args)).unwrap_or_else(|e| panic!("podman {args:?}: {e}"))
}

/// What a container wrote (podman logs it to stdout and stderr as the container did).
fn logs(container: &str) -> String {
    let (stdout, stderr) = run("podman", &["logs", container]).unwrap_or_default();
    stdout + "\n" + &stderr
}

/// What the test made, removed when dropped (also when the test fails, after printing the
/// end of each container's log): the pods, volumes and network whose names start with its
/// prefix, and its scratch directory.
struct Made {
    prefix: String,
    network: String,
    dir: PathBuf,
}

impl Made {
    /// What `podman <list> --format <format>` lists (`pod ps`, ...) with the prefix.
    fn ours(&self, list: &str, format: &str) -> Vec<String> {
        let args: Vec<&str> = list.split(' ').chain(["--format", format]).collect();
        let listing = podman(&args).unwrap_or_default();
        let ours = listing.lines().filter(|n| n.starts_with(&self.prefix));
        ours.map(str::to_string).collect()
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for line in self.ours("ps -a", "{{.Names}} {{.Status}}") {
                let log = logs(line.split(' ').next().unwrap_or_default());
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                eprintln!("kube_play: {line}; its log ends:");
                tail.iter().rev().for_each(|l| eprintln!("    {l}"));
            }
        }
        // One name a call: podman 4.3's rm stops at a name that does not exist.
        for pod in self.ours("pod ps", NAME) {
            let _ = podman(&["pod", "rm", "-f", "-t", "0", &pod]);
        }
        for volume in self.ours("volume ls", NAME) {
            let _ = podman(&["volume", "rm", "-f", &volume]);
        }
        let _ = podman(&["network", "rm", "-f", &self.network]);
        let _ = std::fs::remove_dir_all(&self.dir);
        let lists = ["pod ps", "volume ls", "network ls"];
        let left: Vec<String> = lists.iter().flat_map(|l| self.ours(l, NAME)).collect();
        match left.is_empty() {
            true => eprintln!("kube_play: removed all {}*", self.prefix),
            false => eprintln!("kube_play: LEFT BEHIND: {left:?}"),
        }
    }
}

/// Writes `docs` (JSON is YAML) to `file` in the scratch directory and plays it.
fn play(made: &Made, file: &str, docs: &[&Value]) {
    let path = made.dir.join(file);
    let text: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
    std::fs::write(&path, text.join("\n---\n")).unwrap();
    let network = made.network.as_str();
    must(&["kube", "play", "--network", network, path.to_str().unwrap()]);
}

/// The address of pod `pod` on `network` (its infra container's).
fn pod_addr(pod: &str, network: &str) -> IpAddr {
    let infra = field("pod", pod, "{{.InfraContainerID}}");
    let inspect = must_json(&["container", "inspect", &infra]);
    let ip = &inspect[0]["NetworkSettings"]["Networks"][network]["IPAddress"];
    let ip = ip.as_str().and_then(|s| s.parse().ok());
    ip.unwrap_or_else(|| panic!("{pod} has no address on {network}"))
}

/// The elements of the array `value[key]`, if there is one.
fn each<'a>(value: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    let array = value.get_mut(key).and_then(Value::as_array_mut);
    array.into_iter().flatten()
}

/// A rendered pod template as a Pod named `name` that podman 4.3 runs, adjusted as the
/// module documentation says; `publish`: a port on 127.0.0.1 for the port `memcache`.
fn as_pod(name: &str, template: &Value, publish: Option<u16>) -> Value {
    let mut spec = template["spec"].clone();
    let mut renamed = HashMap::new();
    for volume in each(&mut spec, "volumes").filter(|v| v.get("emptyDir").is_some()) {
        let old = volume["name"].as_str().unwrap().to_string();
        volume["name"] = json!(format!("{name}-{old}"));
        renamed.insert(old, volume["name"].clone());
    }
    for c in each(&mut spec, "containers") {
        for mount in each(c, "volumeMounts") {
            if let Some(new) = renamed.get(mount["name"].as_str().unwrap()) {
                mount["name"] = new.clone();
            }
        }
        let c = c.as_object_mut().unwrap();
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            c.remove(probe);
        }
        let ports = c.remove("ports").unwrap_or(json!([]));
        if let Some(host_port) = publish {
            let ports = ports.as_array().unwrap();
            let port = ports.iter().find(|p| p["name"] == "memcache");
            let mut port = port.expect("a port named memcache").clone();
            port["hostIP"] = json!("127.0.0.1");
            port["hostPort"] = json!(host_port);
            c.insert("ports".into(), json!([port]));
        }
        let text = Value::Object(c.clone()).to_string();
        assert!(!text.contains("$("), "$(VAR), not expanded: {text}");
    }
    let meta = &template["metadata"];
    let mut annotations = meta["annotations"].as_object().cloned().unwrap_or_default();
    annotations.retain(|_, v| v.as_str().is_some_and(|v| v.len() <= 63));
    let metadata = json!({"name": name, "labels": meta["labels"], "annotations": annotations});
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// `helm template` of the chart with `values`, as JSON documents (PyYAML converts them).
fn render(dir: &Path, release: &str, values: &Value) -> Vec<Value> {
    let (values_file, rendered) = (dir.join("values.json"), dir.join("rendered.yaml"));
    std::fs::write(&values_file, values.to_string()).unwrap();
    let chart = repo("deploy/helm/memfleet");
    let (chart, values) = (chart.to_str().unwrap(), values_file.to_str().unwrap());
    let args = ["template", release, chart, "-n", NAMESPACE, "-f", values];
    let yaml = run(repo("target/tools/bin/helm"), &args).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&rendered, yaml.0).unwrap();
    let convert = "import json, sys, yaml; \
                   json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], sys.stdout)";
    let python = repo("target/tools/venv/bin/python");
    let json = run(python, &["-c", convert, rendered.to_str().unwrap()]);
    serde_json::from_str(&json.unwrap_or_else(|e| panic!("{e}")).0).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let is = |d: &&Value| d["kind"] == kind && d["metadata"]["name"] == name;
    let found = docs.iter().find(is);
    found.unwrap_or_else(|| panic!("the rendering has no {kind} {name}"))
}

/// A port free on every address for UDP and TCP a moment ago, for the DNS server on the
/// gateway's address (which exists only once a pod is on the network).
fn free_dns_port() -> u16 {
    loop {
        let port = UdpSocket::bind("0.0.0.0:0").and_then(|s| s.local_addr());
        let port = port.unwrap().port();
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
}

#[derive(Debug, PartialEq)]
enum Got {
    Hit(String),
    Miss,
    Error(String),
}

/// A memcached text-protocol connection, requests pipelined in batches.
struct Client(BufReader<TcpStream>);

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return Client(BufReader::new(s));
            }
            assert!(Instant::now() < deadline, "nothing answers on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.0.read_line(&mut line).expect("a reply line");
        assert!(!line.is_empty(), "connection closed");
        line.trim_end().to_string()
    }

    /// Sets each key to [`value_of`] it; how many were STORED.
    fn set(&mut self, keys: &[String]) -> usize {
        let mut stored = 0;
        for batch in keys.chunks(200) {
            let mut out = Vec::new();
            for k in batch {
                let v = value_of(k);
                write!(out, "set {k} 0 0 {}\r\n{v}\r\n", v.len()).unwrap();
            }
            self.0.get_mut().write_all(&out).unwrap();
            stored += (0..batch.len()).filter(|_| self.line() == "STORED").count();
        }
        stored
    }

    fn get(&mut self, keys: &[String]) -> Vec<Got> {
        let mut got = Vec::new();
        for batch in keys.chunks(200) {
            let out: String = batch.iter().map(|k| format!("get {k}\r\n")).collect();
            self.0.get_mut().write_all(out.as_bytes()).unwrap();
            for _ in batch {
                let line = self.line();
                got.push(match line.strip_prefix("VALUE ") {
                    _ if line == "END" => Got::Miss,
                    Some(header) => {
                        let len: usize = header.rsplit(' ').next().unwrap().parse().unwrap();
                        let mut data = vec![0; len + 2];
                        self.0.read_exact(&mut data).unwrap();
                        assert_eq!(self.line(), "END");
                        Got::Hit(String::from_utf8_lossy(&data[..len]).into_owned())
                    }
                    None => Got::Error(line),
                });
            }
        }
        got
    }

    fn curr_items(&mut self) -> usize {
        self.0.get_mut().write_all(b"stats\r\n").unwrap();
        let stats = std::iter::repeat_with(|| self.line()).take_while(|l| l != "END");
        let stats: Vec<String> = stats.collect();
        let n = stats
            .iter()
            .find_map(|l| l.strip_prefix("STAT curr_items "));
        n.expect("STAT curr_items").parse().unwrap()
    }
}

fn value_of(key: &str) -> String {
    format!("{key}-{}", "v".repeat(100))
}

/// How many of `keys` hit through `client` with [`value_of`] them.
fn hits(client: &mut Client, keys: &[String]) -> usize {
    let want = keys.iter().map(|k| Got::Hit(value_of(k)));
    let got = client.get(keys);
    got.into_iter().zip(want).filter(|(a, b)| a == b).count()
}

/// Waits up to `seconds` for `done`; how long it took.
fn wait(seconds: u64, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let (start, limit) = (Instant::now(), Duration::from_secs(seconds));
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

fn data(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, 11211)
}

/// The server pods (names, their DNS names: the SRV targets, addresses), the DNS server and
/// a connection to the router. (Fields drop in order: everything the test made goes last.)
struct Fleet {
    router: Client,
    dns: DnsServer,
    names: Vec<String>,
    targets: Vec<String>,
    addrs: Vec<IpAddr>,
    /// `terminationGracePeriodSeconds` of the servers, as rendered.
    grace: String,
    made: Made,
}

impl Fleet {
    /// The chart rendered and played: 3 servers, their DNS records, the router.
    fn start(started: Instant) -> Fleet {
        let nanos = std::time::UNIX_EPOCH.elapsed().unwrap().subsec_nanos();
        let prefix = format!("kp{}{:04x}", std::process::id(), nanos & 0xffff);
        let made = Made {
            network: format!("{prefix}-net"),
            dir: std::env::temp_dir().join(format!("memfleet-{prefix}")),
            prefix: prefix.clone(),
        };
        std::fs::create_dir_all(&made.dir).unwrap();
        must(&["network", "create", &made.network]);
        let network = must_json(&["network", "inspect", &made.network]);
        let gateway = network[0]["subnets"][0]["gateway"].as_str().unwrap();
        let dns_addr = SocketAddr::new(gateway.parse().unwrap(), free_dns_port());

        let values = json!({
            "image": {"repository": "localhost/memfleet", "tag": "latest", "pullPolicy": "Never"},
            "server": {"replicas": 3, "memoryMiB": 16, "threads": 1},
            "router": {
                "replicas": 1, "threads": 1, "resolveInterval": "1s",
                "nameservers": [dns_addr.to_string()],
                "pool": {"serverRetryTimeoutMs": 1000},
            },
        });
        let docs = render(&made.dir, &prefix, &values);
        let fullname = format!("{prefix}-memfleet");
        let template = &find(&docs, "StatefulSet", &fullname)["spec"]["template"];
        let grace = template["spec"]["terminationGracePeriodSeconds"].to_string();
        let names: Vec<String> = (0..3).map(|i| format!("{fullname}-{i}")).collect();
        // The servers first: the gateway's address exists once a pod is on the network.
        for (i, name) in names.iter().enumerate() {
            let pod = as_pod(name, template, None);
            play(&made, &format!("server-{i}.yaml"), &[&pod]);
        }
        let addrs: Vec<IpAddr> = names.iter().map(|n| pod_addr(n, &made.network)).collect();
        for &ip in &addrs {
            assert_eq!(Client::connect(data(ip)).curr_items(), 0);
        }
        let dns = DnsServer::start_on(dns_addr)
            .unwrap_or_else(|e| panic!("the DNS server on {dns_addr}, the gateway: {e}"));
        let domain = format!("{fullname}.{NAMESPACE}.svc.cluster.local");
        let targets: Vec<String> = names.iter().map(|n| format!("{n}.{domain}")).collect();
        for (target, &ip) in targets.iter().zip(&addrs) {
            dns.set_a(target, &[ip], 1);
        }
        let srv: Vec<(&str, u16)> = targets.iter().map(|t| (t.as_str(), 11211)).collect();
        dns.set_srv(&format!("_memcache._tcp.{domain}"), &srv, 1);

        let port = memfleet_testkit::free_port();
        let router = format!("{fullname}-router");
        let template = &find(&docs, "Deployment", &router)["spec"]["template"];
        let pod = as_pod(&format!("{router}-0"), template, Some(port));
        let played = Instant::now();
        let config = find(&docs, "ConfigMap", &router);
        play(&made, "router.yaml", &[config, &pod]);
        let router = Client::connect(SocketAddr::from(([127, 0, 0, 1], port)));
        let mut fleet = Fleet {
            router,
            dns,
            names,
            targets,
            addrs,
            grace,
            made,
        };
        let addr = |i: usize| Some(data(fleet.addrs[i]).to_string());
        let want: BTreeMap<_, _> = (0..3).map(|i| (fleet.member(i), addr(i))).collect();
        wait(15, "the router finds the 3 pods through DNS", || {
            fleet.members() == want
        });
        let (addrs, played, started) = (&fleet.addrs, played.elapsed(), started.elapsed());
        eprintln!(
            "kube_play: 3 server pods at {addrs:?}; the router on 127.0.0.1:{port}, its pool \
             complete {played:?} after it was played (SRV via {dns_addr}), {started:?} after the \
             test began"
        );
        fleet
    }

    /// Server `i`'s name in the router's pool.
    fn member(&self, i: usize) -> String {
        format!("{}:11211", self.targets[i])
    }

    /// Each member of the router's pool (`name` -> `addr`), from `__memfleet__.pools`.
    fn members(&mut self) -> BTreeMap<String, Option<String>> {
        let got = self.router.get(&["__memfleet__.pools".to_string()]);
        let Some(Got::Hit(json)) = got.first() else {
            panic!("__memfleet__.pools: {got:?}")
        };
        let pools: Value = serde_json::from_str(json).unwrap();
        let servers = pools["pools"][0]["servers"].as_array().unwrap();
        let name = |s: &Value| s["name"].as_str().unwrap().to_string();
        let addr = |s: &Value| s["addr"].as_str().map(str::to_string);
        servers.iter().map(|s| (name(s), addr(s))).collect()
    }

    /// The server (index) each key's route names (`__memfleet__.route(KEY)`).
    fn owners(&mut self, keys: &[String]) -> Vec<usize> {
        let route = |k: &String| format!("__memfleet__.route({k})");
        let route: Vec<String> = keys.iter().map(route).collect();
        let members: Vec<String> = (0..3).map(|i| self.member(i)).collect();
        let owner = |g: &Got| match g {
            Got::Hit(m) if members.contains(m) => members.iter().position(|x| x == m).unwrap(),
            other => panic!("route: {other:?}"),
        };
        self.router.get(&route).iter().map(owner).collect()
    }

    /// `curr_items` of server `i`, asked at its pod's address.
    fn curr_items(&self, i: usize) -> usize {
        Client::connect(data(self.addrs[i])).curr_items()
    }
}

#[test]
#[ignore = "needs podman, the image and helm: run by scripts/check-kube-play"]
fn the_charts_pods_run_under_podman_kube_play() {
    let started = Instant::now();
    if std::env::var_os("CONTAINERS_CONF").is_none() {
        std::env::set_var("CONTAINERS_CONF", repo("deploy/container/containers.conf"));
    }
    if let Err(e) = podman(&["--version"]) {
        panic!("podman is needed (scripts/check-kube-play installs it): {e}");
    }
    if podman(&["image", "exists", IMAGE]).is_err() {
        panic!("the image {IMAGE} is missing: build it with scripts/build-image");
    }
    for tool in ["target/tools/bin/helm", "target/tools/venv/bin/python"] {
        let why = "missing: scripts/tools/chart-tools installs it";
        assert!(repo(tool).exists(), "{tool} is {why}");
    }
    let mut fleet = Fleet::start(started);

    // Filled through the router: every key reads back, each server holds exactly its keys.
    let keys: Vec<String> = (0..KEYS).map(|i| format!("kube:{i}")).collect();
    let stored = fleet.router.set(&keys);
    assert_eq!(stored, KEYS, "sets STORED through the router");
    assert_eq!(hits(&mut fleet.router, &keys), KEYS, "keys read back");
    let owner = fleet.owners(&keys);
    let on = |i: usize| -> Vec<String> {
        let mine = keys.iter().zip(&owner).filter(|&(_, &o)| o == i);
        mine.map(|(k, _)| k.clone()).collect()
    };
    let held: Vec<usize> = (0..3).map(|i| fleet.curr_items(i)).collect();
    eprintln!("kube_play: {KEYS} keys set and read back through the router; per server {held:?}");
    for (i, &n) in held.iter().enumerate() {
        assert_eq!(n, on(i).len(), "server {i} holds the keys routed to it");
    }

    // Server 1's container restarted in place (same pod, same volume), as the kubelet does
    // after an image patch: SIGTERM, and the pod's restartPolicy starts it again.
    let container = format!("{}-server", fleet.names[1]);
    let infra = field("pod", &fleet.names[1], "{{.InfraContainerID}}");
    let pid = || field("container", &infra, "{{.State.Pid}}");
    let format = "{{.RestartCount}} {{.State.Status}}";
    let state = || field("container", &container, format);
    let (infra_pid, restart) = (pid(), Instant::now());
    assert_eq!(state(), "0 running");
    must(&["kill", "--signal", "TERM", &container]);
    wait(60, "the container restarted", || state() == "1 running");
    assert_eq!(pid(), infra_pid, "the same pod (sandbox) throughout");
    let addr = pod_addr(&fleet.names[1], &fleet.made.network);
    assert_eq!(addr, fleet.addrs[1], "the same pod, at the same address");
    let (before, after, keys1) = (held[1], fleet.curr_items(1), on(1));
    let back = wait(15, "the router reaches the restarted server", || {
        hits(&mut fleet.router, &keys1[..1]) == 1
    });
    let through = hits(&mut fleet.router, &keys1);
    let log = logs(&container);
    let is_warm = |l: &&str| l.contains("memory file: warm restart");
    let warm = log.lines().find(is_warm);
    let (of, took, line) = (keys1.len(), restart.elapsed(), warm.unwrap_or("(none)"));
    eprintln!(
        "kube_play: {container} restarted in place: curr_items {before} -> {after}, {through} of \
         its {of} keys hit through the router {took:?} after the restart began ({back:?} of it \
         waiting for the router); its log: {line}"
    );
    assert!(warm.is_some(), "the server says it restarted warm");
    assert!(after * 100 >= before * 99, "{after} of {before} items back");
    assert!(through * 100 >= of * 99, "{through} of {of} keys hit");

    // Server 2's pod replaced: removed (its emptyDir with it, as in Kubernetes) and played
    // again, empty, at a new address under the same name; its A record says so.
    let got = fleet.router.get(&keys);
    let others: Vec<String> = (0..KEYS)
        .filter(|&k| owner[k] != 2 && got[k] == Got::Hit(value_of(&keys[k])))
        .map(|k| keys[k].clone())
        .collect();
    let old = fleet.addrs[2];
    must(&["pod", "rm", "-f", "-t", &fleet.grace, &fleet.names[2]]);
    let volume = podman(&[
        "volume",
        "exists",
        &format!("{}-memory-file", fleet.names[2]),
    ]);
    assert!(volume.is_err(), "the emptyDir goes with its pod");
    let file = fleet.made.dir.join("server-2.yaml");
    let network = fleet.made.network.as_str();
    must(&["kube", "play", "--network", network, file.to_str().unwrap()]);
    fleet.addrs[2] = pod_addr(&fleet.names[2], network);
    assert_ne!(fleet.addrs[2], old, "the replacement has a new address");
    assert_eq!(fleet.curr_items(2), 0, "a new pod starts empty");
    fleet.dns.set_a(&fleet.targets[2], &[fleet.addrs[2]], 1);
    let (member, new) = (fleet.member(2), Some(data(fleet.addrs[2]).to_string()));
    let followed = wait(10, "the router follows the new address", || {
        fleet.members().get(&member) == Some(&new)
    });
    let now = fleet.owners(&keys);
    let moved = now.iter().zip(&owner).filter(|(a, b)| a != b).count();
    let others_hit = hits(&mut fleet.router, &others);
    let keys2 = on(2);
    let got = fleet.router.get(&keys2);
    let misses = got.iter().filter(|g| **g == Got::Miss).count();
    let errors: Vec<&Got> = got.iter().filter(|g| matches!(g, Got::Error(_))).collect();
    let stored = fleet.router.set(&keys2);
    let reread = hits(&mut fleet.router, &keys2);
    let new_items = fleet.curr_items(2);
    let (pod, new) = (&fleet.names[2], fleet.addrs[2]);
    let (n_others, n2, n_errors) = (others.len(), keys2.len(), errors.len());
    eprintln!(
        "kube_play: pod {pod} replaced ({old} -> {new}): the router followed {followed:?} after \
         the A record changed (resolve interval 1s); keys that changed owner: {moved}; the \
         other pods' keys: {others_hit} of {n_others} hit; the replaced pod's {n2} keys: \
         {misses} missed (new and empty), {n_errors} errors, {stored} stored again, {reread} \
         read back, curr_items {new_items}"
    );
    assert!(followed.as_secs() < 5, "followed after {followed:?}");
    assert_eq!(moved, 0, "no key changes owner");
    assert_eq!(others_hit, others.len(), "the other pods' keys still hit");
    assert!(errors.is_empty(), "{errors:?}");
    let all = keys2.len();
    assert_eq!((misses, stored, reread, new_items), (all, all, all, all));
    eprintln!("kube_play: all shown in {:?}", started.elapsed());
}
