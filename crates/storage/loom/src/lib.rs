//! Nothing but a home for `tests/loom_protocol.rs`, the loom model checks of
//! `memfleet-storage`'s concurrent protocols, built with `--cfg loom`:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p memfleet-storage-loom --test loom_protocol --release
//! ```
//!
//! Apart from the engine so that such a build compiles the engine and loom alone, not the
//! engine's own dev-dependencies (criterion, proptest).
