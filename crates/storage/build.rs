//! Declares the `loom` cfg (`RUSTFLAGS="--cfg loom"`, see `src/sync.rs`), so that ordinary
//! builds do not warn about an unknown cfg.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
