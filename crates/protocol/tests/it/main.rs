//! memfleet-protocol's integration tests: parsing and encoding against tables of memcached's
//! own replies, and properties. One test binary (linked once), a module per subject, each run
//! in a process of its own by `scripts/test-binaries` (`cargo test -p memfleet-protocol --test
//! it MODULE::` runs one).

mod common;

mod binary;
mod encode;
mod parse;
mod props;
mod replies_meta;
mod replies_text;
