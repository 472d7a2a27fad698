//! `toml_file`'s tests: pools, routes, the `[router]` table and every problem of a file.

use super::*;
use crate::routes::{Gutter, Prefix, RouteKind};

#[test]
fn toml_pools() {
    let pools = from_toml(
        r#"
        [pools.main]
        listen = "127.0.0.1:22122"
        hash_tag = "{}"
        servers = ["10.0.0.1:11211:1", "10.0.0.2:11211:2 b"]

        [pools.jumpy]
        distribution = "jump"
        servers = ["10.0.0.3:11211"]
        "#,
    )
    .unwrap()
    .pools;
    assert_eq!(pools.len(), 2);
    let main = pools.iter().find(|p| p.name == "main").unwrap();
    assert_eq!(
        main.distribution,
        Distribution::Ketama(KetamaDialect::Libmemcached)
    );
    assert_eq!((main.hash, main.hash_tag), (KeyHash::Md5, Some(*b"{}")));
    assert_eq!(main.servers[1].name.as_deref(), Some("b"));
    // No rehash unless asked for; servers are marked down after 2 failures either way.
    assert!(!main.auto_eject_hosts);
    assert_eq!(
        (main.server_failure_limit, main.server_retry_timeout_ms),
        (2, 30_000)
    );
    let ejecting = from_toml(
        "[pools.e]\nauto_eject_hosts = true\nserver_retry_timeout_ms = 500\n\
         servers = [\"10.0.0.1:11211\"]\n",
    )
    .unwrap();
    assert!(ejecting.pools[0].auto_eject_hosts);
    let err = |text: &str| from_toml(text).unwrap_err().to_string();
    assert!(err("[pools.x]\nservers = []\n").contains("no servers"));
    assert!(err("[pools.x]\nhash = \"sha1\"\nservers = [\"a:1\"]\n").contains("unknown hash"));
    assert!(err("[pools.x]\nservers = [\"a:1\", \"a:1\"]\n").contains("twice"));
    assert!(err("[pools.x]\nservrs = [\"a:1\"]\n").contains("unknown field"));
    assert_eq!(from_toml("pools = {}\n").unwrap_err(), ConfigError::Empty);
}

#[test]
fn every_problem_of_a_file_is_reported() {
    let errors = check_toml(
        "[pools.a]\nservers = []\n\
         [pools.b]\nservrs = [\"a:1\"]\n\
         [pools.c]\nitem_size_max = 5\nservers = [\"10.0.0.1:1\"]\n\
         [pools.ok]\nservers = [\"10.0.0.1:2\"]\n\
         [routes.r]\ntype = \"fanout\"\n\
         [routes.s]\ntype = \"gutter\"\nmain = \"ok\"\n\
         [router]\nresolve_interval = \"soon\"\n\
         [pool.typo]\nservers = []\n",
    )
    .unwrap_err();
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let want = [
        "pool a: has no servers",
        "pool b: unknown field `servrs`",
        "pool c: item_size_max = 5",
        "route r: unknown route type",
        "route s: a gutter route needs \"gutter\"",
        "[router] resolve_interval",
        "unknown table \"pool\"",
    ];
    assert_eq!(text.len(), want.len(), "{text:#?}");
    for w in want {
        assert!(text.iter().any(|t| t.contains(w)), "{w} not in {text:#?}");
    }
    // Routes are checked together once each could be read.
    let errors = check_toml(
        "[pools.a]\nservers = [\"10.0.0.1:1\"]\n\
         [routes.r]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"nowhere\"\n",
    )
    .unwrap_err();
    assert!(errors[0].to_string().contains("nowhere"), "{errors:?}");
    let twice = check_toml(
        "[pools.a]\nlisten = \"127.0.0.1:1\"\nservers = [\"10.0.0.1:1\"]\n\
         [routes.r]\nlisten = \"127.0.0.1:1\"\ntype = \"operation\"\ndefault = \"a\"\n",
    )
    .unwrap();
    let problems: Vec<String> = twice
        .listener_problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(problems, ["r and a both listen on 127.0.0.1:1"]);
    let bad = check_toml("[pools.a]\nlisten = \"localhost\"\nservers = [\"10.0.0.1:1\"]\n");
    assert!(bad.unwrap().listener_problems()[0]
        .to_string()
        .contains("a: listen \"localhost\" is neither"));
    let none = check_toml("[pools.a]\nservers = [\"10.0.0.1:1\"]\n").unwrap();
    assert!(none.listener_problems()[0]
        .to_string()
        .contains("no pool or route"));
}

#[test]
fn toml_item_size_and_listener_keys() {
    use crate::config::ListenOptions;
    let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
    let config = from_toml(&pool(
        "listen = \"127.0.0.1:1\"\nitem_size_max = 4194304\npreconnect = true\n\
         backlog = 64\nreuseport = true\ntcpkeepalive = true\nclient_connections = 9\n",
    ))
    .unwrap();
    let a = &config.pools[0];
    assert_eq!(a.item_size_max, 4 << 20);
    assert!(a.preconnect);
    assert_eq!(
        a.listener,
        ListenOptions {
            backlog: 64,
            reuseport: true,
            tcp_keepalive: true,
            client_connections: 9,
            workers: crate::ListenerWorkers::ALL,
            auto_discovery: false,
            remote_markers: false,
        }
    );
    let plain = from_toml(&pool("")).unwrap();
    assert_eq!(plain.pools[0].item_size_max, 1 << 20);
    let err = |keys: &str| from_toml(&pool(keys)).unwrap_err().to_string();
    assert!(err("item_size_max = 1000\n").contains("pool a: item_size_max = 1000"));
    assert!(err("item_size_max = 1073741825\n").contains("out of range"));
    assert_eq!(
        from_toml(&pool("item_size_max = 1073741824\n"))
            .unwrap()
            .pools[0]
            .item_size_max,
        1 << 30
    );
    assert!(err("reuseport = true\n").contains("reuseport sets how the pool's listener"));
    assert!(err("item_size_max = -1\n").contains("item_size_max"));
}

#[test]
fn toml_dns_pools() {
    use crate::config::DnsEntry;
    let config = from_toml(
        "[router]\nresolve_interval = \"250ms\"\nnameservers = [\"127.0.0.1:5353\"]\n\
         [pools.main]\nservers = [\"dnssrv+_memcache._tcp.cache.test\", \
         \"dns+cache.test:11211\", \"10.0.0.9:11211\"]\n\
         [pools.plain]\nservers = [\"10.0.0.1:11211\"]\n",
    )
    .unwrap();
    assert_eq!(
        config.discovery.resolve_interval,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(
        config.discovery.nameservers,
        vec!["127.0.0.1:5353".parse().unwrap()]
    );
    assert!(config.has_dns());
    let main = &config.pools[0];
    assert_eq!(main.servers.len(), 1);
    assert_eq!(
        main.dns,
        vec![
            DnsEntry::Srv {
                name: "_memcache._tcp.cache.test".into()
            },
            DnsEntry::Addresses {
                name: "cache.test".into(),
                port: 11211
            }
        ]
    );
    // Only DNS entries: no ring to check yet.
    let only = from_toml("[pools.a]\nservers = [\"dnssrv+_memcache._tcp.a.test\"]\n").unwrap();
    assert!(only.pools[0].servers.is_empty());
    assert_eq!(only.discovery, DiscoverySettings::default());
    assert!(!from_toml("[pools.a]\nservers = [\"10.0.0.1:1\"]\n")
        .unwrap()
        .has_dns());
    let err = |text: &str| from_toml(text).unwrap_err().to_string();
    assert!(err("[pools.a]\nservers = [\"dns+a.test\"]\n").contains("dns+NAME:PORT"));
    assert!(err("[pools.a]\nservers = [\"dns+a.test:1\", \"dns+A.test:1\"]\n").contains("twice"));
    assert!(
        err("[router]\nresolve_interval = \"soon\"\n[pools.a]\nservers = [\"a:1\"]\n")
            .contains("resolve_interval")
    );
    assert!(
        err("[router]\nnameservers = [\"dns.test\"]\n[pools.a]\nservers = [\"a:1\"]\n")
            .contains("nameserver")
    );
}

#[test]
fn toml_pool_tls() {
    let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
    let config = from_toml(&pool(
        "tls = true\ntls_ca = \"/ca.pem\"\ntls_server_name = \"cache\"\n\
         tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n",
    ))
    .unwrap();
    assert_eq!(
        config.pools[0].tls,
        Some(PoolTls {
            ca: "/ca.pem".into(),
            server_name: Some("cache".into()),
            cert: Some("/c.pem".into()),
            key: Some("/k.pem".into()),
        })
    );
    assert_eq!(from_toml(&pool("")).unwrap().pools[0].tls, None);
    for refused in [
        "tls = true\n",
        "tls_ca = \"/ca.pem\"\n",
        "tls = true\ntls_ca = \"/ca.pem\"\ntls_cert = \"/c.pem\"\n",
    ] {
        assert!(from_toml(&pool(refused)).is_err(), "{refused}");
    }
}

#[test]
fn toml_pool_auth() {
    let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
    let config = from_toml(&pool("auth_user = \"app\"\nauth_password_file = \"/pw\"\n")).unwrap();
    assert_eq!(
        config.pools[0].auth,
        Some(PoolAuth {
            user: "app".into(),
            password: PasswordSource::File("/pw".into()),
            sasl: false,
        })
    );
    let sasl = from_toml(&pool(
        "auth_user = \"app\"\nauth_password = \"x\"\nauth_mechanism = \"sasl\"\n",
    ))
    .unwrap();
    assert!(sasl.pools[0].auth.as_ref().unwrap().sasl);
    let inline = from_toml(&pool("auth_user = \"app\"\nauth_password = \"hush\"\n")).unwrap();
    assert_eq!(
        inline.pools[0].auth.as_ref().unwrap().password,
        PasswordSource::Inline("hush".into())
    );
    assert!(!format!("{inline:?}").contains("hush"), "{inline:?}");
    assert_eq!(from_toml(&pool("")).unwrap().pools[0].auth, None);
    for (refused, why) in [
        ("auth_user = \"app\"\n", "auth_user needs"),
        ("auth_password = \"x\"\n", "need auth_user"),
        ("auth_password_file = \"/pw\"\n", "need auth_user"),
        (
            "auth_user = \"app\"\nauth_password = \"x\"\nauth_password_file = \"/pw\"\n",
            "alternatives",
        ),
        (
            "auth_user = \"a b\"\nauth_password = \"x\"\n",
            "without spaces",
        ),
        (
            "auth_user = \"\"\nauth_password = \"x\"\n",
            "without spaces",
        ),
        (
            "auth_user = \"a\"\nauth_password = \"x\\ny\"\n",
            "line break",
        ),
        (
            "auth_user = \"a\"\nauth_password = \"x\"\nauth_mechanism = \"md5\"\n",
            "\"ascii\" (memcached -Y) or \"sasl\"",
        ),
        (
            "auth_mechanism = \"sasl\"\n",
            "auth_mechanism needs auth_user",
        ),
    ] {
        let err = from_toml(&pool(refused)).unwrap_err().to_string();
        assert!(err.contains(why), "{refused}: {err}");
    }
}

#[test]
fn toml_routes() {
    let pools = "[pools.a]\nservers = [\"10.0.0.1:11211\"]\n\
                 [pools.b]\nservers = [\"10.0.0.2:11211\"]\n";
    let config = from_toml(&format!(
        "{pools}[router]\nspool_dir = \"/var/spool/memfleet\"\n\
         [routes.web]\nlisten = \"127.0.0.1:5000\"\ntype = \"prefix\"\n\
         prefixes = {{ \"u:\" = \"both\", \"u:x:\" = \"a\" }}\ndefault = \"safe\"\n\
         [routes.both]\ntype = \"replicated\"\nreplicas = [\"a\", \"b\"]\n\
         [routes.safe]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"b\"\n"
    ))
    .unwrap();
    assert_eq!(config.spool_dir.as_deref(), Some("/var/spool/memfleet"));
    let web = config.routes.iter().find(|r| r.name == "web").unwrap();
    assert_eq!(web.listen.as_deref(), Some("127.0.0.1:5000"));
    // Longest prefix first.
    assert_eq!(
        web.kind,
        RouteKind::Prefix(Prefix {
            prefixes: vec![("u:x:".into(), "a".into()), ("u:".into(), "both".into())],
            default: "safe".into(),
            strip: false,
        })
    );
    let safe = config.routes.iter().find(|r| r.name == "safe").unwrap();
    assert_eq!(
        safe.kind,
        RouteKind::Gutter(Gutter {
            main: "a".into(),
            gutter: "b".into(),
            ttl: 10
        })
    );
    let err = |routes: &str| {
        from_toml(&format!("{pools}{routes}"))
            .unwrap_err()
            .to_string()
    };
    assert!(
        err("[routes.r]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"c\"\n")
            .contains("no pool or route named \"c\"")
    );
    assert!(err("[routes.r]\ntype = \"gutter\"\nmain = \"a\"\n").contains("needs \"gutter\""));
    assert!(
        err("[routes.r]\ntype = \"broadcast\"\nto = [\"a\"]\nmain = \"a\"\n")
            .contains("takes no \"main\"")
    );
    assert!(err("[routes.r]\ntype = \"fanout\"\n").contains("unknown route type"));
    assert!(err("[routes.a]\ntype = \"broadcast\"\nto = [\"b\"]\n").contains("both a pool"));
    assert!(err("[routes.x]\ntype = \"broadcast\"\nto = [\"y\"]\n\
         [routes.y]\ntype = \"operation\"\ndefault = \"x\"\n")
    .contains("loop"));
}

#[test]
fn pool_rates() {
    let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
    let a = from_toml(&pool(
        "rates = { gets = 50000, sets = 5000, deletes = 5000 }\n",
    ))
    .unwrap();
    assert_eq!(
        a.pools[0].rates,
        PoolRates {
            gets: Some(50_000),
            sets: Some(5000),
            deletes: Some(5000)
        }
    );
    assert_eq!(
        from_toml(&pool("")).unwrap().pools[0].rates,
        PoolRates::default()
    );
    let err = |keys: &str| from_toml(&pool(keys)).unwrap_err().to_string();
    assert!(err("rates = { reads = 5 }\n").contains("unknown rate \"reads\""));
    assert!(err("rates = { gets = 0 }\n").contains("rates.gets = 0"));
}

#[test]
fn pool_max_outstanding() {
    let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
    let read = |keys: &str| from_toml(&pool(keys)).unwrap().pools[0].max_outstanding;
    assert_eq!(read(""), None);
    assert_eq!(
        read("max_outstanding = 256\n"),
        Some(MaxOutstanding {
            limit: 256,
            queue: 256
        })
    );
    assert_eq!(
        read("max_outstanding = 8\nmax_outstanding_queue = 0\n"),
        Some(MaxOutstanding { limit: 8, queue: 0 })
    );
    let err = |keys: &str| from_toml(&pool(keys)).unwrap_err().to_string();
    assert!(err("max_outstanding = 0\n").contains("max_outstanding = 0: 1 to 1048576"));
    assert!(
        err("max_outstanding_queue = 5\n").contains("max_outstanding_queue needs max_outstanding")
    );
    assert!(
        err("max_outstanding = 4\nmax_outstanding_queue = 2000000\n")
            .contains("max_outstanding_queue = 2000000")
    );
}

#[test]
fn max_client_connections() {
    let file = |router: &str| format!("{router}[pools.a]\nservers = [\"10.0.0.1:11211\"]\n");
    let c = from_toml(&file("[router]\nmax_client_connections = 100\n")).unwrap();
    assert_eq!(c.max_client_connections, Some(100));
    assert_eq!(from_toml(&file("")).unwrap().max_client_connections, None);
    assert_eq!(
        from_toml(&file("[router]\nmax_client_connections = 0\n"))
            .unwrap()
            .max_client_connections,
        None
    );
    assert!(from_toml(&file("[router]\nmax_client_connections = -1\n")).is_err());
}

#[test]
fn zones() {
    let c = from_toml(
        "[router]\nzone = \"z1\"\n[pools.a]\nzone = \"z1\"\nservers = [\"10.0.0.1:11211\"]\n\
         [pools.b]\nservers = [\"10.0.0.2:11211\"]\n",
    )
    .unwrap();
    assert_eq!(c.zone.as_deref(), Some("z1"));
    assert_eq!(c.pools[0].zone.as_deref(), Some("z1"));
    assert_eq!(c.pools[1].zone, None);
}

#[test]
fn max_down_fraction() {
    let pool = |keys: &str| format!("[pools.a]\nservers = [\"10.0.0.1:11211\"]\n{keys}");
    assert_eq!(
        from_toml(&pool("")).unwrap().pools[0].max_down_fraction,
        Fraction(0.5)
    );
    assert_eq!(
        from_toml(&pool("max_down_fraction = 0.25\n"))
            .unwrap()
            .pools[0]
            .max_down_fraction,
        Fraction(0.25)
    );
    let err = from_toml(&pool("max_down_fraction = 0.0\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_down_fraction = 0"), "{err}");
    assert!(from_toml(&pool("max_down_fraction = 1.5\n")).is_err());
    let yaml = crate::from_twemproxy_yaml("a:\n  servers:\n   - 127.0.0.1:1:1\n").unwrap();
    assert_eq!(
        yaml[0].max_down_fraction,
        Fraction(1.0),
        "twemproxy: no cap"
    );
}

#[test]
fn toml_listener_workers_place_clients_on_lanes_of_their_worker() {
    use crate::ListenerWorkers;
    let config = from_toml(
        "[pools.a]\nlisten = \"127.0.0.1:1\"\nworkers = [3, 1]\nservers = [\"10.0.0.1:1\"]\n\
         [routes.r]\nlisten = \"127.0.0.1:2\"\ntype = \"null\"\nworkers = [0]\n",
    )
    .unwrap();
    let a = config.pools[0].listener.workers;
    assert_eq!(a.list(), vec![1, 3]);
    assert_eq!(a.highest(), Some(3));
    assert_eq!(config.routes[0].workers.list(), vec![0]);
    assert_eq!(ListenerWorkers::ALL.highest(), None);
    // Named workers in turn, each client on the next lane of its worker (lane ≡ worker
    // mod k), so a worker's clients spread over its server connections.
    let placed: Vec<(usize, usize)> = (0..6).map(|n| a.place(n, 4)).collect();
    assert_eq!(
        placed,
        vec![(1, 1), (3, 3), (1, 5), (3, 7), (1, 9), (3, 11)]
    );
    // Every worker: worker nth % k on lane nth, as before there were lists.
    for n in 0..20 {
        assert_eq!(ListenerWorkers::ALL.place(n, 3), (n % 3, n));
    }
    // A check needs the worker count; 0 is unknown.
    let mut config = config;
    assert!(config.worker_problems().is_empty());
    config.workers = 3;
    assert!(config.worker_problems()[0]
        .to_string()
        .contains("a: workers = [1, 3] names worker 3, but the router runs 3"));
    config.workers = 4;
    assert!(config.worker_problems().is_empty());
}
