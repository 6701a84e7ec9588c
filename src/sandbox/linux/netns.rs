//! The run's network namespace (ADR-0106): the agent and every command the
//! exit starts live in a network namespace with nothing in it but its own
//! loopback, where one TCP listener, the session's egress proxy
//! (`crate::egress`), is the only way out.
//!
//! Namespaces are per thread for the network: `nd7 run`, just moved into
//! its user namespace (`ns::enter`) and still holding the
//! capabilities that gives, first starts one thread, the *outside* thread,
//! which stays in the network namespace the account had; then moves its
//! own main thread into a new network namespace, brings its `lo` up and
//! binds the proxy's listener to `127.0.0.1` there. Every thread and
//! process `nd7 run` starts afterwards from its main thread (the exit's, the
//! agent) is born inside; the proxy is started from the outside thread
//! ([`Net::outside`]), so its threads, and the sockets they open to the
//! world, are outside. Inside there is no route, no other address, no
//! resolver: a direct connection, UDP (DNS included), raw sockets, IPv6 and
//! the host's loopback services fail at once.

use std::io;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

/// The variables that point clients at the proxy, for `port`.
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
        .iter()
        .flat_map(|k| [k.to_string(), k.to_ascii_lowercase()])
        .map(|k| (k, url.clone()))
        .collect()
}

/// Variables that would send a client around the proxy (to a direct
/// connection that fails inside): removed from the agent's and commands'
/// environment.
pub const BYPASS_VARIABLES: &[&str] = &["NO_PROXY", "no_proxy"];

type Job = Box<dyn FnOnce() + Send>;

/// The run's network namespace, entered by `nd7 run`'s main thread.
#[derive(Debug)]
pub struct Net {
    /// The proxy's port on the namespace's 127.0.0.1.
    pub port: u16,
    listener: Mutex<Option<TcpListener>>,
    outside: Mutex<Sender<Job>>,
}

impl Net {
    /// The listener, made inside; once.
    pub fn take_listener(&self) -> Option<TcpListener> {
        self.listener.lock().ok()?.take()
    }

    /// Runs `job` on the outside thread: whatever threads it starts, and the
    /// sockets they open, are in the account's own network namespace.
    pub fn outside(&self, job: impl FnOnce() + Send + 'static) -> io::Result<()> {
        self.outside
            .lock()
            .map_err(|_| io::Error::other("the outside thread's channel is poisoned"))?
            .send(Box::new(job))
            .map_err(|_| io::Error::other("the outside thread has ended"))
    }
}

/// Starts the outside thread, then moves the calling thread into a new
/// network namespace with `lo` up and a listener on 127.0.0.1. Needs
/// `CAP_SYS_ADMIN` and `CAP_NET_ADMIN` in the calling thread's user
/// namespace (which owns the new one); `drop_capabilities` drops the
/// calling thread's (`ns::drop_thread_capabilities`), for the outside one.
pub fn enter(drop_capabilities: fn() -> io::Result<()>) -> Result<Net, String> {
    let (tx, rx) = channel::<Job>();
    std::thread::Builder::new()
        .name("nd7-outside".into())
        .spawn(move || {
            // Capabilities are per thread: this one keeps none.
            let _ = drop_capabilities();
            for job in rx {
                job();
            }
        })
        .map_err(|e| format!("start the thread that stays outside the network namespace: {e}"))?;
    // SAFETY: unshare with a flag only; a new network namespace for the
    // calling thread, which the kernel allows a threaded process.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "create a network namespace: {}",
            io::Error::last_os_error()
        ));
    }
    loopback_up().map_err(|e| format!("bring up the network namespace's loopback: {e}"))?;
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("listen on the network namespace's loopback: {e}"))?;
    // The keeper, outside, describes the run's unix sockets through a
    // socket of this namespace (`supervise::describe_inside`).
    let diag = rustix::net::socket_with(
        rustix::net::AddressFamily::NETLINK,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        Some(rustix::net::netlink::SOCK_DIAG),
    )
    .map_err(|e| format!("open the network namespace's socket diagnostics: {e}"))?;
    super::keeper::send(
        super::keeper::NET_DIAG,
        &[],
        std::os::fd::AsFd::as_fd(&diag),
    )
    .map_err(|e| format!("hand the keeper the namespace's socket diagnostics: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("read the proxy's port: {e}"))?
        .port();
    Ok(Net {
        port,
        listener: Mutex::new(Some(listener)),
        outside: Mutex::new(tx),
    })
}

/// `struct ifreq` with the flags member, as SIOCSIFFLAGS reads it.
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Sets `lo` up in the calling thread's network namespace.
fn loopback_up() -> io::Result<()> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| {
        // No address is bound yet: any AF_INET socket serves for the ioctl.
        rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            None,
        )
        .map(std::net::UdpSocket::from)
        .map_err(io::Error::from)
    })?;
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: SIOCSIFFLAGS reads a `struct ifreq`, which `req` lays out (name,
    // then the flags at offset 16, padded to the union's size).
    // The request's type is glibc's unsigned long and musl's int (libc::Ioctl):
    // the release's static Linux builds are musl.
    let r = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFFLAGS as libc::Ioctl,
            &req as *const IfReqFlags,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The process holding the client's end of a TCP connection to the proxy
/// (`peer` its address, `local` the proxy's), from the network namespace's
/// table (`/proc/self/net/tcp` is the main thread's, inside) and the
/// account's processes' descriptors: pid and name. `None` when it cannot
/// be told (gone, another account's). With `only`, that process's
/// descriptors alone are looked at (cheap enough for every connection).
pub fn client_process(
    peer: std::net::SocketAddr,
    local: std::net::SocketAddr,
    only: Option<u32>,
) -> Option<(u32, String)> {
    let hex = |a: std::net::SocketAddr| match a.ip() {
        std::net::IpAddr::V4(ip) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(ip.octets()),
            a.port()
        )),
        std::net::IpAddr::V6(_) => None,
    };
    let (want, proxy) = (hex(peer)?, hex(local)?);
    let table = std::fs::read_to_string("/proc/self/net/tcp").ok()?;
    let inode = table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&want.as_str()) && f.get(2) == Some(&proxy.as_str()))
            .then(|| f.get(9).map(|s| s.to_string()))
            .flatten()
    })?;
    let link = format!("socket:[{inode}]");
    let holds = |dir: &std::path::Path| {
        std::fs::read_dir(dir.join("fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == link.as_str())
            })
        })
    };
    let named = |pid: u32, dir: &std::path::Path| {
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        Some((pid, name.trim().to_string()))
    };
    if let Some(pid) = only {
        let dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        return if holds(&dir) { named(pid, &dir) } else { None };
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if holds(&entry.path()) {
            return named(pid, &entry.path());
        }
    }
    None
}
