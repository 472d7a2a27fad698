//! The flash and TLS settings, which memcached spells as `-o` options too (`ext_path`,
//! `ext_threads`, `ssl_chain_cert`, ...): the long flags (or the file's keys) with those
//! spellings over them.

use super::{parse_size, Flash, FlashIo, ServerArgs};
use anyhow::{bail, Context};
use memfleet_tls::ServerTlsFiles;
use std::time::Duration;

/// The flash settings: `--flash` and memcached's `-o ext_path=...,ext_threads=...` over the
/// file's.
pub(super) fn resolve_flash(args: &ServerArgs) -> anyhow::Result<Flash> {
    let mut paths: Vec<String> = args.flash.clone();
    let mut threads = args.flash_threads;
    for option in args.extended.iter().flat_map(|o| o.split(',')) {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        match name.trim() {
            "ext_path" => paths.push(value.to_string()),
            "ext_threads" => {
                threads =
                    Some(value.trim().parse().with_context(|| {
                        format!("-o ext_threads: expected a number, got {value:?}")
                    })?)
            }
            ext if ext.starts_with("ext_") => {
                tracing::info!(
                    option = ext,
                    "extstore tuning has no effect on memfleet's flash tier"
                );
            }
            _ => {}
        }
    }
    let files = paths
        .iter()
        .map(|p| memfleet_flash::FlashSpec::parse(p).with_context(|| format!("--flash {p}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let threads = threads.unwrap_or(4);
    if !(1..=256).contains(&threads) {
        bail!("--flash-threads must be between 1 and 256, got {threads}");
    }
    let write_budget = args
        .flash_write_budget
        .as_deref()
        .map(parse_size)
        .transpose()?;
    let write_budget = write_budget.map(|b| b as u64);
    let item_size = match args.flash_item_size.as_deref() {
        Some(text) => parse_size(text)?,
        None => 512,
    };
    if !(64..=1 << 20).contains(&item_size) {
        bail!("--flash-item-size must be between 64 and 1m, got {item_size}");
    }
    if write_budget == Some(0) {
        bail!("--flash-write-budget must be above 0 (leave it out for no limit)");
    }
    let io = match args.flash_io.as_deref() {
        None | Some("uring") => FlashIo::Uring,
        Some("threads") => FlashIo::Threads,
        Some(other) => bail!("flash_io: expected uring or threads, got {other:?}"),
    };
    Ok(Flash {
        files,
        threads,
        write_budget,
        item_size,
        test_delay: args.flash_test_delay_ms.map(Duration::from_millis),
        io,
    })
}

/// The TLS settings from the flags (long ones, or memcached's `-Z -o ssl_*`) over the file.
pub(super) fn resolve_tls(args: &ServerArgs) -> anyhow::Result<Option<ServerTlsFiles>> {
    let mut cert = args.tls_cert.clone();
    let mut key = args.tls_key.clone();
    let mut ca = args.tls_ca.clone();
    let mut verify_client = args.tls_verify_client.then_some(true);
    for option in args.extended.iter().flat_map(|o| o.split(',')) {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        match name.trim() {
            "ssl_chain_cert" => cert = Some(value.into()),
            "ssl_key" => key = Some(value.into()),
            "ssl_ca_cert" => ca = Some(value.into()),
            "ssl_verify_mode" => {
                verify_client = Some(match value.trim() {
                    // 0 checks nothing, 1 checks a certificate if one is offered.
                    "0" => {
                        ca = None;
                        false
                    }
                    "1" => false,
                    // 3 ("once") is memcached's 2 without renegotiation, which TLS 1.3 lacks.
                    "2" | "3" => true,
                    other => bail!("-o ssl_verify_mode: expected 0 to 3, got {other:?}"),
                })
            }
            "" => {}
            // extstore's options: `resolve_flash`.
            ext if ext.starts_with("ext_") => {}
            other => bail!(
                "-o {other}: only memcached's TLS and extstore options (ssl_chain_cert, ssl_key, ssl_ca_cert, \
                 ssl_verify_mode) are understood here; see --help for the others' flags"
            ),
        }
    }
    let verify_client = verify_client.unwrap_or(false);
    if args.enable_ssl && (cert.is_none() || key.is_none()) {
        bail!("-Z needs a certificate and key: --tls-cert and --tls-key (or -o ssl_chain_cert=...,ssl_key=...)");
    }
    ServerTlsFiles::from_options(cert, key, ca, verify_client)
}
