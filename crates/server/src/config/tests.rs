//! Unit tests of `config.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn tls_flags_and_memcached_spellings_agree() {
    let long = ServerArgs {
        tls_cert: Some("c.pem".into()),
        tls_key: Some("k.pem".into()),
        tls_ca: Some("ca.pem".into()),
        tls_verify_client: true,
        ..ServerArgs::default()
    };
    let memcached = ServerArgs {
        enable_ssl: true,
        extended: vec![
            "ssl_chain_cert=c.pem,ssl_key=k.pem".into(),
            "ssl_ca_cert=ca.pem,ssl_verify_mode=2".into(),
        ],
        ..ServerArgs::default()
    };
    let a = Settings::resolve(&long).unwrap().listen.tls.unwrap();
    assert_eq!(
        Some(&a),
        Settings::resolve(&memcached).unwrap().listen.tls.as_ref()
    );
    assert!(a.verify_client);
    let refused = [
        ServerArgs {
            enable_ssl: true,
            ..ServerArgs::default()
        },
        ServerArgs {
            tls_cert: Some("c.pem".into()),
            ..ServerArgs::default()
        },
        ServerArgs {
            tls_cert: Some("c.pem".into()),
            tls_key: Some("k.pem".into()),
            tls_verify_client: true,
            ..ServerArgs::default()
        },
        ServerArgs {
            extended: vec!["idle_timeout=5".into()],
            ..ServerArgs::default()
        },
    ];
    for args in refused {
        assert!(Settings::resolve(&args).is_err(), "{args:?}");
    }
    assert_eq!(
        Settings::resolve(&ServerArgs::default())
            .unwrap()
            .listen
            .tls,
        None
    );
}

#[test]
fn sizes_parse_like_memcached() {
    assert_eq!(parse_size("1m").unwrap(), 1 << 20);
    assert_eq!(parse_size("512k").unwrap(), 512 << 10);
    assert_eq!(parse_size("2048").unwrap(), 2048);
    assert!(parse_size("lots").is_err());
}

#[test]
fn file_settings_apply_under_flags() {
    let dir = std::env::temp_dir().join(format!("memfleet-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("server.toml");
    std::fs::write(
        &path,
        "port = 4000\nmemory_limit = 16\nmax_item_size = \"2m\"\n",
    )
    .unwrap();
    let args = ServerArgs {
        config: Some(path.clone()),
        port: Some(5000),
        ..ServerArgs::default()
    };
    let s = Settings::resolve(&args).unwrap();
    assert_eq!(
        (s.listen.port, s.limits.memory_bytes, s.limits.max_item_size),
        (5000, 16 << 20, 2 << 20)
    );
    assert_eq!(s.segment_size(), 2 << 20);
    std::fs::write(&path, "prot = 1\n").unwrap();
    let err = Settings::resolve(&args).unwrap_err();
    assert!(format!("{err:#}").contains("unknown field"), "{err:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn debug_time_is_off_unless_asked_for_and_not_with_a_memory_file() {
    assert!(
        !Settings::resolve(&ServerArgs::default())
            .unwrap()
            .debug_time
    );
    let debug = ServerArgs {
        debug_time: true,
        ..ServerArgs::default()
    };
    assert!(Settings::resolve(&debug).unwrap().debug_time);
    let warm = ServerArgs {
        memory_file: Some("/nonexistent/memfleet.mem".into()),
        ..debug
    };
    let err = Settings::resolve(&warm).unwrap_err();
    assert!(format!("{err:#}").contains("--debug-time"), "{err:#}");
}

#[test]
fn udp_writes_are_off_unless_asked_for_and_need_udp() {
    let udp = ServerArgs {
        udp_port: Some(11311),
        ..ServerArgs::default()
    };
    assert!(!Settings::resolve(&udp).unwrap().listen.udp_writes);
    let writes = ServerArgs {
        udp_writes: true,
        ..udp
    };
    assert!(Settings::resolve(&writes).unwrap().listen.udp_writes);
    let no_port = ServerArgs {
        udp_writes: true,
        ..ServerArgs::default()
    };
    let err = Settings::resolve(&no_port).unwrap_err();
    assert!(format!("{err:#}").contains("needs --udp-port"), "{err:#}");
    // The flag's spelling, and the TOML key.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        server: ServerArgs,
    }
    let cli = <Cli as clap::Parser>::try_parse_from(["memfleet", "-U", "1", "--udp-writes"]);
    assert!(
        Settings::resolve(&cli.unwrap().server)
            .unwrap()
            .listen
            .udp_writes
    );
    let dir = std::env::temp_dir().join(format!("memfleet-udp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("server.toml");
    std::fs::write(&path, "udp_port = 11311\nudp_writes = true\n").unwrap();
    let file = ServerArgs {
        config: Some(path),
        ..ServerArgs::default()
    };
    assert!(Settings::resolve(&file).unwrap().listen.udp_writes);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn item_size_must_fit_memory() {
    let args = ServerArgs {
        memory_limit: Some(1),
        ..ServerArgs::default()
    };
    assert!(Settings::resolve(&args).is_err());
}

#[test]
fn flash_flags_and_memcached_ext_options_agree() {
    let long = ServerArgs {
        flash: vec!["/var/tmp/f:64m".into()],
        flash_threads: Some(8),
        ..ServerArgs::default()
    };
    let memcached = ServerArgs {
        extended: vec!["ext_path=/var/tmp/f:64m,ext_threads=8,ext_item_size=512".into()],
        ..ServerArgs::default()
    };
    let a = Settings::resolve(&long).unwrap().flash;
    assert_eq!(a, Settings::resolve(&memcached).unwrap().flash);
    assert_eq!(
        (a.files.len(), a.files[0].size, a.threads),
        (1, 64 << 20, 8)
    );
    assert_eq!(a.item_size, 512);
    assert_eq!(a.io, FlashIo::Uring, "io_uring unless told otherwise");
    let threads = ServerArgs {
        flash: vec!["/var/tmp/f:64m".into()],
        flash_io: Some("threads".into()),
        ..ServerArgs::default()
    };
    assert_eq!(
        Settings::resolve(&threads).unwrap().flash.io,
        FlashIo::Threads
    );
    let bad_io = ServerArgs {
        flash: vec!["/var/tmp/f:64m".into()],
        flash_io: Some("aio".into()),
        ..ServerArgs::default()
    };
    assert!(
        Settings::resolve(&bad_io).is_err(),
        "--flash-io aio is refused"
    );
    let small = ServerArgs {
        flash: vec!["/var/tmp/f:64m".into()],
        flash_item_size: Some("32".into()),
        ..ServerArgs::default()
    };
    assert!(
        Settings::resolve(&small).is_err(),
        "an item size below 64 is refused"
    );
    for bad in [
        vec!["ext_path=/var/tmp/f".to_string()],
        vec!["ext_threads=many".to_string()],
    ] {
        let args = ServerArgs {
            extended: bad,
            ..ServerArgs::default()
        };
        assert!(Settings::resolve(&args).is_err(), "{args:?}");
    }
    let udp = ServerArgs {
        flash: vec!["/var/tmp/f:64m".into()],
        udp_port: Some(11311),
        ..ServerArgs::default()
    };
    assert!(
        Settings::resolve(&udp).is_err(),
        "flash with UDP is refused"
    );
    assert!(Settings::resolve(&ServerArgs::default())
        .unwrap()
        .flash
        .files
        .is_empty());
}

#[test]
fn sasl_needs_a_password_database_and_excludes_ascii_auth_and_udp() {
    let sasl = ServerArgs {
        enable_sasl: true,
        ..ServerArgs::default()
    };
    let err = Settings::resolve(&sasl).unwrap_err();
    assert!(
        format!("{err:#}").contains("MEMCACHED_SASL_PWDB"),
        "{err:#}"
    );
    let with_db = ServerArgs {
        sasl_pwdb: Some("/etc/memfleet/sasl.pwdb".into()),
        ..sasl
    };
    let s = Settings::resolve(&with_db).unwrap();
    assert_eq!(
        s.listen.sasl_pwdb.as_deref(),
        Some(std::path::Path::new("/etc/memfleet/sasl.pwdb"))
    );
    // A database given without -S turns nothing on.
    let db_only = ServerArgs {
        enable_sasl: false,
        ..with_db.clone()
    };
    assert_eq!(Settings::resolve(&db_only).unwrap().listen.sasl_pwdb, None);
    let ascii = ServerArgs {
        auth_file: Some("/etc/memfleet/auth".into()),
        ..with_db.clone()
    };
    let err = Settings::resolve(&ascii).unwrap_err();
    assert!(format!("{err:#}").contains("--auth-file"), "{err:#}");
    let udp = ServerArgs {
        udp_port: Some(11211),
        ..with_db
    };
    let err = Settings::resolve(&udp).unwrap_err();
    assert!(
        format!("{err:#}").contains("Cannot enable UDP while using binary SASL"),
        "{err:#}"
    );
}

#[test]
fn every_flag_reads_from_the_file_under_its_own_name() {
    let dir = std::env::temp_dir().join(format!("memfleet-every-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("server.toml");
    std::fs::write(
        &path,
        "max_item_size = 2097152\nlisten_backlog = 64\ndisable_flush_all = true\n\
         flash = [\"/nonexistent/a:1g\"]\nflash_item_size = \"1k\"\nflash_write_budget = 1048576\n",
    )
    .unwrap();
    let args = ServerArgs {
        config: Some(path.clone()),
        ..ServerArgs::default()
    };
    let s = Settings::resolve(&args).unwrap();
    assert_eq!(s.limits.max_item_size, 2 << 20);
    assert_eq!(s.listen.backlog, 64);
    assert!(s.flush_disabled);
    assert_eq!(s.flash.files.len(), 1);
    assert_eq!(
        (s.flash.item_size, s.flash.write_budget),
        (1024, Some(1 << 20))
    );
    // A flag beats the file; memcached's `-o ext_path` replaces the file's flash files.
    let cli = ServerArgs {
        max_item_size: Some("4m".into()),
        extended: vec!["ext_path=/nonexistent/b:2g,ext_path=/nonexistent/c:2g".into()],
        ..args.clone()
    };
    let s = Settings::resolve(&cli).unwrap();
    assert_eq!(s.limits.max_item_size, 4 << 20);
    assert_eq!(s.flash.files.len(), 2);
    // What only the command line says is no file setting.
    for line in [
        "config = \"/etc/x.toml\"\n",
        "extended = [\"ssl_key=k\"]\n",
        "backlog = 5\n",
    ] {
        std::fs::write(&path, line).unwrap();
        let err = Settings::resolve(&args).unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field"),
            "{line}: {err:#}"
        );
    }
    std::fs::write(&path, "max_item_size = true\n").unwrap();
    assert!(Settings::resolve(&args).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
