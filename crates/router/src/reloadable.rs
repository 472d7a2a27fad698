//! What a reload swaps while clients stay connected: each listener's route, the topology
//! `stats` and `/metrics` read, and the auth file's users.

use memfleet_authfile::Credentials;
use memfleet_client::{Route, Topology};
use std::sync::Arc;

/// The route a listener serves now (a pool is a route too): a reload swaps it, and every
/// client connection reads it per request, so new routing applies to open connections.
pub(crate) type RouteSlot = Arc<arc_swap::ArcSwap<Route>>;

/// What a router serves now: read by `stats`, `/metrics` and the next reload.
pub type ServedTopology = Arc<arc_swap::ArcSwap<Topology>>;

/// Who may use the listeners (`--auth-file`), as loaded now: a reload swaps it; `None`:
/// no authentication.
pub type ClientAuth = Arc<arc_swap::ArcSwapOption<Credentials>>;
