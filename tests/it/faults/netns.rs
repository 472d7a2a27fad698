//! A network namespace joined to this one by a veth pair on a private /30
//! (10.201.x.y, derived from the test's pid; host `i` of a test that needs several:
//! 10.(202 + i).x.y), to run a server behind a link the test can cut without a reset: with
//! the namespace's end of the pair down, packets to it vanish (no RST, no ICMP), as with a
//! pulled cable or a partitioned switch. Each namespace is a machine of its own, with its
//! own address; this namespace is the machine the tests (and routers) run on.
//!
//! Needs root and `ip`; [`Namespace::create`] says why it cannot, and the test skips.
//! Everything made is removed when the guard drops, also when the test panics: the
//! processes inside are killed, the namespace deleted (which deletes the veth pair with it).

use std::process::Command;

/// The namespace, its veth pair and its addresses.
pub struct Namespace {
    /// The namespace's name (`ip netns exec NAME ...`).
    pub name: String,
    /// The interface inside the namespace.
    inner: String,
    /// The interface on this side.
    outer: String,
    /// This side's address.
    pub host_addr: String,
    /// The namespace's address.
    pub ns_addr: String,
}

/// Runs `ip ARGS`; the error says what failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Namespace {
    /// Creates the namespace and the link, both up; `Err` says why not (not root, no `ip`,
    /// no permission to create namespaces).
    pub fn create() -> Result<Namespace, String> {
        Namespace::make("", 201)
    }

    /// Host `i` (0 to 40) of a test that needs several: [`Namespace::create`] on a /30 of
    /// its own.
    #[allow(dead_code)]
    pub fn host(i: u8) -> Result<Namespace, String> {
        assert!(i <= 40, "host {i}: at most 41 hosts");
        Namespace::make(&format!("x{i}"), 202 + i)
    }

    fn make(suffix: &str, net: u8) -> Result<Namespace, String> {
        // SAFETY: geteuid(2) takes nothing and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let pid = std::process::id();
        // A /30 per pid: 10.<net>.<a>.<4b> (.1 here, .2 there).
        let (a, b) = ((pid / 64) % 256, (pid % 64) * 4);
        let ns = Namespace {
            name: format!("mff{pid}{suffix}"),
            inner: format!("mff{pid}{suffix}n"),
            outer: format!("mff{pid}{suffix}h"),
            host_addr: format!("10.{net}.{a}.{}", b + 1),
            ns_addr: format!("10.{net}.{a}.{}", b + 2),
        };
        ip(&["netns", "add", &ns.name])?;
        // From here on, Drop cleans up whatever was made.
        let (name, inner, outer) = (ns.name.clone(), ns.inner.clone(), ns.outer.clone());
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ])?;
        ip(&["link", "set", &inner, "netns", &name])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", ns.host_addr),
            "dev",
            &outer,
        ])?;
        ip(&["link", "set", &outer, "up"])?;
        let cidr = format!("{}/30", ns.ns_addr);
        ip(&[
            "netns", "exec", &name, "ip", "addr", "add", &cidr, "dev", &inner,
        ])?;
        ip(&["netns", "exec", &name, "ip", "link", "set", &inner, "up"])?;
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Cuts the link (packets to the namespace are dropped silently) or restores it.
    pub fn link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&[
            "netns",
            "exec",
            &self.name,
            "ip",
            "link",
            "set",
            &self.inner,
            state,
        ])
        .expect("setting the namespace's link");
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // Whatever still runs inside (a server a panic left behind) goes first.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    // SAFETY: kill(2) on a process inside the namespace this test made.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
        let _ = ip(&["netns", "del", &self.name]);
        // Gone with the namespace; deleted here only if the pair was never moved into it.
        let _ = ip(&["link", "del", &self.outer]);
    }
}
