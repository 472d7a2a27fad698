//! Fuzz target for the configuration readers an operator's file goes through:
//! `memfleet_routing::from_toml` (pools, routes, router settings) and
//! `from_twemproxy_yaml`. Any text must be accepted or refused with an error; an accepted
//! configuration's pools must build their rings, and its routes name only what exists.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = memfleet_routing::from_toml(text) {
        for pool in &config.pools {
            let ring = pool.ring().expect("an accepted pool builds its ring");
            let _ = ring.pick(b"some key");
        }
        for route in &config.routes {
            for name in route.kind.children() {
                assert!(
                    config.pools.iter().any(|p| p.name == name)
                        || config.routes.iter().any(|r| r.name == name),
                    "route {} names {name}, which does not exist",
                    route.name
                );
            }
        }
    }
    if let Ok(pools) = memfleet_routing::from_twemproxy_yaml(text) {
        for pool in &pools {
            let ring = pool.ring().expect("an accepted pool builds its ring");
            let _ = ring.pick(b"some key");
        }
    }
});
