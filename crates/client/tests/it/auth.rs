//! The client library against a `memfleet server` that requires memcached's ASCII
//! authentication (`-Y`): a pool with `auth_user` logs in on every connection and works like
//! any other (gets stay on TCP even with UDP on: a datagram cannot authenticate); a wrong
//! password is an `Unreachable(BackendError::Auth)` error naming the server's reply.

use memfleet_client::{BackendError, Client, ClientOptions, Error, UdpGet};
use memfleet_routing::from_toml;
use memfleet_server::{Server, Settings};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// An authenticating server (users in a file under the temp dir) and a client whose pool
/// logs in with `password`.
fn setup(test: &str, password: &str) -> (Server, Client) {
    let dir = std::env::temp_dir().join(format!("memfleet-client-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let authfile = dir.join(format!("{test}.users"));
    std::fs::write(&authfile, "app:s3cret\n").unwrap();
    let server = Server::start({
        let mut settings = Settings::single_worker(0, 16 << 20);
        settings.listen.auth_file = Some(authfile);
        settings
    })
    .expect("server starts");
    let port = server.local_addr().port();
    let config = from_toml(&format!(
        "[pools.main]\nservers = [\"127.0.0.1:{port}\"]\ntimeout_ms = 5000\n\
         auth_user = \"app\"\nauth_password = \"{password}\"\n"
    ))
    .unwrap();
    let client = Client::new(
        &config,
        "main",
        ClientOptions {
            udp: Some(Duration::from_millis(200)),
            compress_above: None,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    (server, client)
}

#[tokio::test]
async fn a_pool_with_auth_user_logs_in() {
    let (_server, cache) = setup("right", "s3cret");
    cache.set("k", b"v", 0).await.unwrap();
    assert_eq!(cache.get("k").await.unwrap().unwrap().data, b"v");
    let UdpGet::Hit(v) = cache.get_udp("k").await.unwrap() else {
        panic!("not a hit");
    };
    assert_eq!(v.data, b"v");
    assert_eq!(
        cache.udp_counters().unwrap().sent.load(Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error() {
    let (_server, cache) = setup("wrong", "guess");
    match cache.set("k", b"v", 0).await {
        Err(Error::Unreachable(BackendError::Auth { reply, .. })) => {
            assert_eq!(reply, "CLIENT_ERROR authentication failure");
        }
        other => panic!("{other:?}"),
    }
}
