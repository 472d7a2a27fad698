//! The packaging files agree with each other and with memfleet: the default configuration
//! the Debian package installs is read by the real commands (and the server serves with
//! it), the units, tmpfiles.d and the configuration name the same paths, and the
//! Containerfile builds exactly the image `scripts/build-image` builds. (The engines
//! themselves — systemd-analyze, dpkg-deb, lintian, podman — run in scripts/check-packages.)

use crate::support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{free_port, Killed};

const EXE: &str = env!("CARGO_BIN_EXE_memfleet");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `KEY=value` lines of a unit (every occurrence, in order).
fn directive(unit: &str, key: &str) -> Vec<String> {
    read(&format!("deploy/systemd/{unit}"))
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
        .collect()
}

#[test]
fn the_default_configuration_is_read_by_each_command() {
    let args = memfleet_server::ServerArgs {
        config: Some(repo("deploy/debian/server.toml")),
        ..Default::default()
    };
    let settings = memfleet_server::Settings::resolve(&args).unwrap();
    assert_eq!(settings.listen.address.to_string(), "127.0.0.1");
    assert_eq!(settings.listen.port, 11211);
    assert_eq!(settings.listen.admin_port, Some(9150));
    assert_eq!(
        settings.memory_file.as_deref(),
        Some(Path::new("/dev/shm/memfleet/server.heap"))
    );

    let router = memfleet_routing::from_toml(&read("deploy/debian/router.toml")).unwrap();
    assert_eq!(router.pools.len(), 1);
    assert_eq!(router.pools[0].listen.as_deref(), Some("127.0.0.1:5000"));

    let invalidator =
        memfleet_invalidator::Config::load(&repo("deploy/debian/invalidator.toml")).unwrap();
    assert_eq!(invalidator.route, "caches");
    assert_eq!(
        invalidator.metrics_listen.as_deref(),
        Some("127.0.0.1:9152")
    );
}

#[test]
fn the_server_serves_with_the_default_configuration() {
    // What the unit runs, with the port, the admin port and the memory file moved out of
    // the way through the environment (as /etc/default/memfleet-server would).
    let dir = std::env::temp_dir().join(format!("memfleet-packages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (port, admin) = (free_port(), free_port());
    let _server = Killed(
        Command::new(EXE)
            .args(["server", "--config"])
            .arg(repo("deploy/debian/server.toml"))
            .env("MEMFLEET_PORT", port.to_string())
            .env("MEMFLEET_ADMIN_PORT", admin.to_string())
            .env("MEMFLEET_MEMORY_FILE", dir.join("server.heap"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut s = support::connect(port, Duration::from_secs(5));
    s.write_all(b"stats settings\r\n").unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 8192];
    while !text.ends_with("END\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(text.contains("STAT maxbytes 67108864\r\n"), "{text}");
    assert!(text.contains("STAT num_threads 4\r\n"), "{text}");
    assert!(support::connect(admin, Duration::from_secs(5))
        .peer_addr()
        .is_ok());
    drop(_server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn units_tmpfiles_and_configuration_name_the_same_paths() {
    // The memory file's directory: the server's configuration, tmpfiles.d, the unit.
    let tmpfiles = read("deploy/debian/memfleet.tmpfiles");
    let line = tmpfiles
        .lines()
        .find(|l| l.starts_with("d "))
        .expect("a d line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[1], "/dev/shm/memfleet");
    assert_eq!((fields[3], fields[4]), ("memfleet", "memfleet"));
    assert_eq!(
        directive("memfleet-server.service", "ReadWritePaths"),
        [fields[1]]
    );
    assert!(read("deploy/debian/server.toml").contains("memory_file = \"/dev/shm/memfleet/"));
    // Every unit runs the packaged binary on a packaged configuration, as the sysusers.d
    // user, and none uses DynamicUser (its RemoveIPC would delete the memory file).
    let sysusers = read("deploy/debian/memfleet.sysusers");
    assert!(sysusers.lines().any(|l| l.starts_with("u memfleet ")));
    let cargo = read("Cargo.toml");
    for (unit, config) in [
        ("memfleet-server.service", "server.toml"),
        ("memfleet-router.service", "router.toml"),
        ("memfleet-invalidator.service", "invalidator.toml"),
    ] {
        let exec = directive(unit, "ExecStart");
        assert_eq!(exec.len(), 1, "{unit}");
        assert!(exec[0].starts_with("/usr/bin/memfleet "), "{unit}");
        assert!(
            exec[0].contains(&format!("--config /etc/memfleet/{config}")),
            "{unit}"
        );
        assert!(
            cargo.contains(&format!(
                "\"deploy/debian/{config}\", \"etc/memfleet/{config}\""
            )),
            "the package does not install /etc/memfleet/{config}"
        );
        assert_eq!(directive(unit, "Type"), ["notify"], "{unit}");
        assert_eq!(directive(unit, "User"), ["memfleet"], "{unit}");
        assert!(directive(unit, "DynamicUser").is_empty(), "{unit}");
        let name = unit.trim_end_matches(".service");
        assert!(
            cargo.contains(&format!("unit-name = \"{name}\"")),
            "the package does not install {unit}"
        );
    }
    for unit in ["memfleet-router.service", "memfleet-invalidator.service"] {
        let name = unit.trim_end_matches(".service");
        assert_eq!(directive(unit, "StateDirectory"), [name], "{unit}");
    }
}

/// The image's settings and files as `scripts/build-image` gives them to `podman import`,
/// and as the Containerfile's final stage says them.
fn normalized(instruction: &str) -> String {
    let (key, value) = instruction
        .split_once(['=', ' '])
        .unwrap_or((instruction, ""));
    let value = if value.starts_with('[') {
        value.replace(", ", ",")
    } else {
        value.to_string()
    };
    format!("{key} {value}")
}

#[test]
fn the_containerfile_builds_what_build_image_builds() {
    let version = env!("CARGO_PKG_VERSION");
    let script = read("scripts/build-image");
    let from_script: BTreeSet<String> = script
        .lines()
        .filter_map(|l| l.trim().strip_prefix("--change "))
        .map(|c| {
            let c = c.trim_end_matches(" \\").trim_matches(['\'', '"']);
            normalized(&c.replace("$version", version))
        })
        .collect();
    let containerfile = read("deploy/container/Containerfile");
    let last_stage = containerfile
        .rsplit_once("\nFROM scratch\n")
        .expect("a FROM scratch stage")
        .1;
    let mut from_containerfile = BTreeSet::new();
    let mut copied = BTreeSet::new();
    for line in last_stage.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(copy) = line.strip_prefix("COPY ") {
            copied.insert(copy.split_whitespace().last().unwrap().to_string());
        } else {
            from_containerfile.insert(normalized(line));
        }
    }
    assert_eq!(from_containerfile, from_script);

    // Files and empty directories: what `scripts/build-image --list` prints for this
    // binary (its libraries by ldd) with every directory that only holds others left out.
    let out = Command::new(repo("scripts/build-image"))
        .arg("--list")
        .env("MEMFLEET_BIN", EXE)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let leaves: BTreeSet<String> = listed
        .iter()
        .filter(|p| !listed.iter().any(|q| q.starts_with(&format!("{p}/"))))
        .cloned()
        .collect();
    assert!(leaves.contains("/usr/bin/memfleet"));
    assert!(leaves.iter().any(|p| p.contains("libc.so")), "{leaves:?}");
    assert_eq!(copied, leaves);
}
