//! The little of epoll both floors need: an epoll instance (level-triggered use) and
//! `TCP_NODELAY` on a raw socket. Not here: what the floors read and write.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turns Nagle off on socket `fd`: replies go out in one send per batch, and Nagle could
/// only delay them.
pub(crate) fn set_nodelay(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: the option value points to a live c_int of the size given; a bad fd only
    // makes the call fail.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// An epoll instance.
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; it returns a new fd or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the fd was just created and nothing else owns it.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: ev is a live epoll_event for the duration of the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub(crate) fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub(crate) fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Waits for events; returns how many of `events` were filled.
    pub(crate) fn wait(&self, events: &mut [libc::epoll_event]) -> io::Result<usize> {
        loop {
            // SAFETY: the pointer and length describe `events`, which the kernel fills.
            let n = unsafe {
                libc::epoll_wait(
                    self.0.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    -1,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}
