//! The vault's HTTP transport: hyper (HTTP/1.1) on a small tokio runtime,
//! with TLS by rustls when it is given a certificate. Built to stay up
//! against any peer that can reach it (ADR-0046):
//!
//! - **Connections** are bounded, overall and per peer address; one that
//!   sends no byte is closed at a deadline shorter than the headers'; an
//!   `accept` that fails (no file descriptors left) is retried after a
//!   pause, never fatal.
//! - **Headers** must arrive within a deadline and fit a size; a
//!   connection idle between requests is closed at the same deadline.
//! - **Bodies** are read only after [`routes::Vault::admit`] said yes from
//!   the headers (route, size, the machine's signature over them, freshness,
//!   nonce, quota), only up to the
//!   stated `Content-Length`, and only while bytes keep coming and within a
//!   total deadline. Bytes of bodies held at once are bounded, overall and
//!   per machine.
//! - **Writes** that make no progress for a while end the connection.
//! - **Storage** runs on a fixed set of threads, each with its own store
//!   connection; requests wait a bounded time for one, then get 503.
//! - **Pulls** stream a chain one batch at a time.
//! - **SIGTERM** (or SIGINT) stops accepting, lets requests in progress
//!   finish (a batch is acknowledged only after its transaction committed),
//!   then exits; **SIGHUP** reloads the TLS certificate and key.
//!
//! Every log line passes through [`nd7_format::safe::term`], so nothing a
//! peer sends (a path, a machine id, a session) reaches the log as a
//! terminal escape or a line break.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use hyper::body::{Body as _, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use super::routes::{self, Reply, Request, refuse};
use super::{Database, Store};
use nd7_format::safe;

/// How the transport runs. Every bound has a flag on `nd7-vault serve`.
#[derive(Clone, Debug)]
pub struct Config {
    /// The longest a request's headers may take, and the longest a
    /// connection may sit idle between requests.
    pub header_timeout: Duration,
    /// The longest a body may go without a byte arriving.
    pub body_stall: Duration,
    /// The longest a whole body may take.
    pub body_deadline: Duration,
    /// The longest a write to a peer may make no progress.
    pub write_stall: Duration,
    /// Connections open at once. When they are all open, a new one evicts
    /// the oldest anonymous connection (one no request has yet proven to be
    /// an enrolled machine's or an admin's) that is not answering a known
    /// machine's request.
    pub max_connections: usize,
    /// Of `max_connections`, how many anonymous connections may never
    /// hold: room kept for machines and admins. Anonymous connections past
    /// the rest evict the oldest of them.
    pub reserved_connections: usize,
    /// Connections one peer address may hold at once (0: no bound; behind a
    /// proxy every connection is the proxy's); more are closed at once.
    pub max_connections_per_peer: usize,
    /// The longest a new connection may go before its first byte (shorter
    /// than `header_timeout`: an idle peer costs a slot for less).
    pub first_byte_timeout: Duration,
    /// The largest request line and headers, in bytes.
    pub max_header_bytes: usize,
    /// Bytes of request bodies held at once, over all requests.
    pub body_budget: usize,
    /// Bytes of request bodies held at once for one machine.
    pub machine_budget: usize,
    /// Storage threads (each with its own connection).
    pub workers: usize,
    /// Requests handed to storage and not answered yet.
    pub max_in_flight: usize,
    /// The longest a request waits for a storage thread or for room in
    /// the body budget before it is told 503.
    pub queue_wait: Duration,
    /// The longest shutdown waits for requests in progress.
    pub shutdown_grace: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            header_timeout: Duration::from_secs(10),
            body_stall: Duration::from_secs(10),
            body_deadline: Duration::from_secs(120),
            write_stall: Duration::from_secs(30),
            max_connections: 4096,
            reserved_connections: 1024,
            max_connections_per_peer: 256,
            first_byte_timeout: Duration::from_secs(5),
            max_header_bytes: 16 * 1024,
            body_budget: 512 << 20,
            machine_budget: 64 << 20,
            workers: 4,
            max_in_flight: 256,
            queue_wait: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// The certificate chain and key `serve` presents, both PEM files, read
/// again on SIGHUP.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where each log line goes.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Store(#[from] super::StoreError),
    #[error("{}: {what}", path.display())]
    Tls { path: PathBuf, what: String },
    /// A step of the start that is on no path (the listener, a thread,
    /// the runtime, a signal handler), with what it was.
    #[error("cannot start: cannot {action}: {source}")]
    Start {
        action: &'static str,
        source: io::Error,
    },
}

/// `map_err(starting("…"))`: a failed start step, with what it was.
fn starting(action: &'static str) -> impl FnOnce(io::Error) -> ServeError {
    move |source| ServeError::Start { action, source }
}

/// Loads a certificate chain and its key into an acceptor.
pub fn load_tls(files: &TlsFiles) -> Result<TlsAcceptor, ServeError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |path: &PathBuf, what: String| ServeError::Tls {
        path: path.clone(),
        what,
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            bad(
                &files.cert,
                format!("cannot read a PEM certificate chain: {e}"),
            )
        })?;
    if certs.is_empty() {
        return Err(bad(&files.cert, "holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad(&files.key, format!("cannot read a PEM private key: {e}")))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
    .map_err(|e| bad(&files.key, format!("does not go with the certificate: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

type Job = Box<dyn FnOnce(&mut dyn Store) + Send>;

/// What every connection shares.
struct Shared {
    vault: routes::Vault,
    config: Config,
    jobs: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    in_flight: Arc<Semaphore>,
    /// The body budget, in KiB.
    bodies: Arc<Semaphore>,
    /// Body bytes held per machine.
    per_machine: Mutex<HashMap<String, usize>>,
    /// The nonces of machines' requests admitted and not yet answered: the
    /// same signed header on a second connection is refused at admission,
    /// not held open beside the first.
    sending: Mutex<std::collections::HashSet<(String, String)>>,
    /// Connections open per peer address.
    per_peer: Mutex<HashMap<std::net::IpAddr, usize>>,
    /// Connections not yet proven to be a machine's or an admin's.
    anonymous: Mutex<Anonymous>,
    /// Anonymous requests (recipients, restores, enrolment) handed to
    /// storage at once, half the storage threads: a flood of them cannot
    /// fill the queue ahead of the machines' and admins' requests.
    anonymous_jobs: Arc<Semaphore>,
    /// The keys of machines whose signature the vault verified, by id: a
    /// later request of theirs is vouched for from its headers alone.
    machines: Mutex<HashMap<String, nd7_format::vault::PublicKey>>,
    log: Log,
}

/// The connections no request has yet proven to be an enrolled machine's
/// or an admin's (ADR-0118), by when they were accepted: those a new
/// connection evicts, oldest first, when there is no room for it.
#[derive(Default)]
struct Anonymous {
    next: u64,
    open: BTreeMap<u64, Waiting>,
    /// Evicted since the last log line that said so.
    evicted: u64,
}

/// An anonymous connection: whether a request of a known machine is being
/// answered on it (not evicted then), and how to end it.
struct Waiting {
    busy: bool,
    evict: oneshot::Sender<()>,
}

/// A connection as [`Anonymous`] tracks it: forgotten when dropped.
struct Tracked {
    shared: Arc<Shared>,
    id: u64,
}

impl Tracked {
    /// While `busy`, the connection is answering a known machine's request
    /// and is not evicted.
    fn busy(&self, busy: bool) {
        let mut anonymous = self.shared.anonymous();
        if let Some(w) = anonymous.open.get_mut(&self.id) {
            w.busy = busy;
        }
    }

    /// A request on this connection proved a machine or an admin: it is
    /// never evicted from now on.
    fn promote(&self) {
        self.shared.anonymous().open.remove(&self.id);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.shared.anonymous().open.remove(&self.id);
    }
}

impl Shared {
    fn log(&self, line: &str) {
        (self.log)(&safe::term(line, safe::Lines::One));
    }

    fn known_machines(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, nd7_format::vault::PublicKey>> {
        self.machines.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the key of a machine whose signature `reply`'s request proved;
    /// forgets a machine refused as revoked.
    fn learn(&self, reply: &Reply) {
        if let Some(m) = &reply.machine {
            self.known_machines().insert(m.0.clone(), m.1);
        } else if let Some(id) = &reply.revoked {
            self.known_machines().remove(id);
        }
    }

    fn anonymous(&self) -> std::sync::MutexGuard<'_, Anonymous> {
        self.anonymous.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection, anonymous until a request proves otherwise; the
    /// receiver resolves if it is evicted.
    fn track(self: &Arc<Shared>) -> (Tracked, oneshot::Receiver<()>) {
        let (evict, evicted) = oneshot::channel();
        let mut anonymous = self.anonymous();
        let id = anonymous.next;
        anonymous.next += 1;
        anonymous.open.insert(id, Waiting { busy: false, evict });
        let tracked = Tracked {
            shared: self.clone(),
            id,
        };
        (tracked, evicted)
    }

    /// Ends the oldest anonymous connection not answering a known machine's
    /// request; false
    /// if there is none.
    fn evict_oldest(&self) -> bool {
        let mut anonymous = self.anonymous();
        let Some(id) = anonymous
            .open
            .iter()
            .find(|(_, w)| !w.busy)
            .map(|(id, _)| *id)
        else {
            return false;
        };
        if let Some(w) = anonymous.open.remove(&id) {
            let _ = w.evict.send(());
        }
        anonymous.evicted += 1;
        true
    }

    /// Whether anonymous connections fill all the room they may have.
    fn anonymous_full(&self) -> bool {
        let room = self
            .config
            .max_connections
            .saturating_sub(self.config.reserved_connections)
            .max(1);
        self.anonymous().open.len() >= room
    }

    /// Runs `f` on a storage thread and waits for its answer.
    async fn on_store<T: Send + 'static>(
        self: &Arc<Shared>,
        f: impl FnOnce(&routes::Vault, &mut dyn Store) -> T + Send + 'static,
    ) -> Result<T, Reply> {
        let busy = || {
            let mut r = refuse(503, "the vault is busy: try again shortly");
            r.retry_after = Some(5);
            r
        };
        let permit = tokio::time::timeout(
            self.config.queue_wait,
            self.in_flight.clone().acquire_owned(),
        )
        .await
        .map_err(|_| busy())?
        .map_err(|_| busy())?;
        let (tx, rx) = oneshot::channel();
        let shared = self.clone();
        let job: Job = Box::new(move |store| {
            let _permit = permit;
            let _ = tx.send(f(&shared.vault, store));
        });
        let sent = match &*self.jobs.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(jobs) => jobs.send(job).is_ok(),
            None => false,
        };
        if !sent {
            return Err(refuse(503, "the vault is shutting down"));
        }
        rx.await
            .map_err(|_| refuse(500, "the vault's storage thread stopped"))
    }
}

/// Serves `listener` until SIGTERM or SIGINT, with `workers` connections to
/// `db`, answering with `vault`, and TLS if `tls` is given. Calls `ready`
/// once the database and certificate are open; each request's line goes
/// to `log`.
pub fn serve(
    listener: std::net::TcpListener,
    db: &Database,
    vault: routes::Vault,
    config: Config,
    tls: Option<TlsFiles>,
    log: Log,
    ready: impl FnOnce(),
) -> Result<(), ServeError> {
    // Every connection first, so a database that cannot be reached stops
    // the start rather than the first requests.
    let mut stores = Vec::new();
    for _ in 0..config.workers.max(1) {
        stores.push(db.open()?);
    }
    let acceptor = match &tls {
        Some(files) => Some(Arc::new(RwLock::new(load_tls(files)?))),
        None => None,
    };
    listener
        .set_nonblocking(true)
        .map_err(starting("make the listener non-blocking"))?;
    let (jobs_tx, jobs_rx) = std::sync::mpsc::channel::<Job>();
    let jobs_rx = Arc::new(Mutex::new(jobs_rx));
    let mut workers = Vec::new();
    for (n, mut store) in stores.into_iter().enumerate() {
        let jobs = jobs_rx.clone();
        let db = db.clone();
        let log = log.clone();
        workers.push(
            std::thread::Builder::new()
                .name(format!("nd7-vault-store-{n}"))
                .spawn(move || {
                    loop {
                        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        let Ok(job) = job else { break };
                        job(&mut *store);
                        if !store.healthy() {
                            match db.open() {
                                Ok(fresh) => {
                                    store = fresh;
                                    log("storage: reconnected to the database");
                                }
                                Err(e) => {
                                    log(&format!("storage: {e}; trying again on the next request"))
                                }
                            }
                        }
                    }
                })
                .map_err(starting("start a storage thread"))?,
        );
    }
    let shared = Arc::new(Shared {
        vault,
        in_flight: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
        bodies: Arc::new(Semaphore::new((config.body_budget >> 10).max(1))),
        per_machine: Mutex::new(HashMap::new()),
        sending: Mutex::new(std::collections::HashSet::new()),
        per_peer: Mutex::new(HashMap::new()),
        anonymous: Mutex::new(Anonymous::default()),
        anonymous_jobs: Arc::new(Semaphore::new((config.workers / 2).max(1))),
        machines: Mutex::new(HashMap::new()),
        jobs: Mutex::new(Some(jobs_tx)),
        config,
        log,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("nd7-vault-io")
        .enable_io()
        .enable_time()
        .build()
        .map_err(starting("build the I/O runtime"))?;
    // Signals are caught from here on, before anyone is told the vault is up.
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        let _inside = runtime.enter();
        Signals {
            term: signal(SignalKind::terminate()).map_err(starting("handle SIGTERM"))?,
            int: signal(SignalKind::interrupt()).map_err(starting("handle SIGINT"))?,
            hup: signal(SignalKind::hangup()).map_err(starting("handle SIGHUP"))?,
            listener: tokio::net::TcpListener::from_std(listener)
                .map_err(starting("hand the listener to the runtime"))?,
        }
    };
    ready();
    let result = runtime.block_on(run(shared.clone(), signals, acceptor, tls));
    // Requests are done or given up on: stop the storage threads once the
    // job they are on (if any) is finished.
    shared.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
    for w in workers {
        let _ = w.join();
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The signals `serve` answers, and its listener, set up inside the runtime.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    listener: tokio::net::TcpListener,
}

async fn run(
    shared: Arc<Shared>,
    signals: Signals,
    acceptor: Option<Arc<RwLock<TlsAcceptor>>>,
    tls: Option<TlsFiles>,
) -> Result<(), ServeError> {
    let Signals {
        mut term,
        mut int,
        mut hup,
        listener,
    } = signals;
    let (stop_tx, stop_rx) = watch::channel(false);
    let connections = Arc::new(Semaphore::new(shared.config.max_connections.max(1)));
    let accepting = tokio::spawn(accept_loop(
        shared.clone(),
        listener,
        connections.clone(),
        acceptor.clone(),
        stop_rx,
    ));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                if let (Some(acceptor), Some(files)) = (&acceptor, &tls) {
                    match load_tls(files) {
                        Ok(fresh) => {
                            *acceptor.write().unwrap_or_else(|p| p.into_inner()) = fresh;
                            shared.log(&format!("tls: reloaded {} and {}", files.cert.display(), files.key.display()));
                        }
                        Err(e) => shared.log(&format!("tls: kept the certificate in use: {e}")),
                    }
                }
            }
        }
    }
    shared.log("shutting down: no new connections; finishing the requests in progress");
    let _ = stop_tx.send(true);
    let _ = accepting.await;
    let all = shared.config.max_connections.max(1) as u32;
    match tokio::time::timeout(shared.config.shutdown_grace, connections.acquire_many(all)).await {
        Ok(_) => shared.log("shut down: every connection closed"),
        Err(_) => shared.log(&format!(
            "shut down: {} connections still open after {} s were cut",
            all as usize - connections.available_permits(),
            shared.config.shutdown_grace.as_secs()
        )),
    }
    Ok(())
}

async fn accept_loop(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    connections: Arc<Semaphore>,
    acceptor: Option<Arc<RwLock<TlsAcceptor>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_complaint: Option<Instant> = None;
    let mut quiet = 0u64;
    let (mut last_refusal, mut refused) = (None::<Instant>, 0u64);
    let mut last_eviction: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped(&mut stop) => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Some(slot) = PeerSlot::take(&shared, peer.ip()) else {
                    // Over its share: closed at once, so one host cannot
                    // hold every connection.
                    drop(stream);
                    refused += 1;
                    if last_refusal.is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(1)) {
                        shared.log(&format!(
                            "closed {refused} connection(s) from {} over its {} at once",
                            peer.ip(),
                            shared.config.max_connections_per_peer
                        ));
                        last_refusal = Some(Instant::now());
                        refused = 0;
                    }
                    continue;
                };
                let Some(permit) = room(&shared, &connections, &mut stop).await else {
                    return;
                };
                if last_eviction.is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(1)) {
                    let evicted = std::mem::take(&mut shared.anonymous().evicted);
                    if evicted > 0 {
                        shared.log(&format!(
                            "evicted {evicted} anonymous connection(s) to make room for new ones"
                        ));
                        last_eviction = Some(Instant::now());
                    }
                }
                let tracked = shared.track();
                let _ = stream.set_nodelay(true);
                let tls = acceptor
                    .as_ref()
                    .map(|a| a.read().unwrap_or_else(|p| p.into_inner()).clone());
                tokio::spawn(connection(
                    shared.clone(),
                    stream,
                    tls,
                    (permit, slot),
                    tracked,
                    stop.clone(),
                ));
            }
            Err(e) => {
                // Out of file descriptors (EMFILE, ENFILE), or a peer that
                // reset before it was accepted: the listener is fine. Wait a
                // moment, so connections can close, and accept again.
                quiet += 1;
                if last_complaint.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    shared.log(&format!(
                        "accept failed ({quiet} time(s) since the last report): {e}; accepting again in 100 ms"
                    ));
                    last_complaint = Some(Instant::now());
                    quiet = 0;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A connection slot for a connection just accepted: at once if there is
/// room, else once the oldest anonymous connection not answering a known
/// machine's request is
/// evicted (ADR-0118), or, when every open connection is a machine's, an
/// admin's or busy, once one closes. Anonymous connections past their
/// share (`max_connections - reserved_connections`) evict one too, so the
/// reserved room stays for connections a request proved. `None` once
/// shutdown has begun.
async fn room(
    shared: &Arc<Shared>,
    connections: &Arc<Semaphore>,
    stop: &mut watch::Receiver<bool>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let mut evicted = shared.anonymous_full() && shared.evict_oldest();
    loop {
        if let Ok(permit) = connections.clone().try_acquire_owned() {
            return Some(permit);
        }
        if !evicted {
            shared.evict_oldest();
        }
        evicted = false;
        // An evicted connection gives its slot back once its task ends;
        // one busy with a request may be evicted once it is done.
        tokio::select! {
            p = connections.clone().acquire_owned() => return p.ok(),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stopped(stop) => return None,
        }
    }
}

/// Resolves once shutdown has begun.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
}

/// One of a peer address's connections, given back when dropped.
struct PeerSlot {
    shared: Arc<Shared>,
    ip: std::net::IpAddr,
}

impl PeerSlot {
    /// A slot for `ip`, unless it holds its share already.
    fn take(shared: &Arc<Shared>, ip: std::net::IpAddr) -> Option<PeerSlot> {
        let cap = shared.config.max_connections_per_peer;
        let mut per = shared.per_peer.lock().unwrap_or_else(|p| p.into_inner());
        let held = per.entry(ip).or_default();
        if cap > 0 && *held >= cap {
            return None;
        }
        *held += 1;
        Some(PeerSlot {
            shared: shared.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut per = self
            .shared
            .per_peer
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(held) = per.get_mut(&self.ip) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                per.remove(&self.ip);
            }
        }
    }
}

async fn connection(
    shared: Arc<Shared>,
    stream: tokio::net::TcpStream,
    tls: Option<TlsAcceptor>,
    _held: (tokio::sync::OwnedSemaphorePermit, PeerSlot),
    (tracked, evicted): (Tracked, oneshot::Receiver<()>),
    stop: watch::Receiver<bool>,
) {
    let evicted = async {
        // The sender is dropped, unsent, when the connection is promoted.
        if evicted.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = evicted => {}
        _ = connected(shared, stream, tls, tracked, stop) => {}
    }
}

/// A connection, from its first byte (and TLS handshake) to its last
/// request.
async fn connected(
    shared: Arc<Shared>,
    stream: tokio::net::TcpStream,
    tls: Option<TlsAcceptor>,
    tracked: Tracked,
    mut stop: watch::Receiver<bool>,
) {
    // A peer that connects and says nothing holds a slot only this long
    // (and none once shutdown begins).
    let mut first_byte = [0u8; 1];
    tokio::select! {
        first = tokio::time::timeout(
            shared.config.first_byte_timeout.min(shared.config.header_timeout),
            stream.peek(&mut first_byte),
        ) => {
            if !matches!(first, Ok(Ok(1..))) {
                return;
            }
        }
        _ = stopped(&mut stop) => return,
    }
    let io = WriteStall::new(stream, shared.config.write_stall);
    match tls {
        None => serve_http(shared, io, tracked, stop).await,
        Some(acceptor) => {
            // A failed or stalled handshake is the peer's to report; the
            // vault's log would only fill with scanners.
            let handshake = tokio::time::timeout(shared.config.header_timeout, acceptor.accept(io));
            if let Ok(Ok(tls)) = handshake.await {
                serve_http(shared, tls, tracked, stop).await
            }
        }
    }
}

async fn serve_http<I>(
    shared: Arc<Shared>,
    io: I,
    tracked: Tracked,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tracked = Arc::new(tracked);
    let service = {
        let shared = shared.clone();
        hyper::service::service_fn(move |request| {
            let (shared, tracked) = (shared.clone(), tracked.clone());
            async move {
                let response = respond(shared, request, &tracked).await;
                tracked.busy(false);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let config = &shared.config;
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .max_header_size(config.max_header_bytes)
        .max_buf_size((config.max_header_bytes * 2).max(64 * 1024))
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// A reply's body: bytes, or a pull's frames as they come.
enum Body {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Result<Bytes, io::Error>>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) => rx.poll_recv(cx).map(|f| f.map(|r| r.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Stream(_) => SizeHint::default(),
        }
    }
}

/// Bytes of body held for one request: returned to the budgets when dropped.
struct Held {
    shared: Arc<Shared>,
    machine: Option<String>,
    bytes: usize,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(m) = &self.machine {
            let mut per = self
                .shared
                .per_machine
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(held) = per.get_mut(m) {
                *held = held.saturating_sub(self.bytes);
                if *held == 0 {
                    per.remove(m);
                }
            }
        }
    }
}

/// Reserves room for a body of `length` bytes from `machine`.
/// A machine's signed request admitted and not yet answered, by its nonce;
/// given back when dropped.
struct Sending {
    shared: Arc<Shared>,
    key: (String, String),
}

impl Sending {
    fn claim(shared: &Arc<Shared>, machine: &str, request: &Request) -> Option<Sending> {
        let nonce = request
            .header(nd7_format::vault::HEADER_NONCE)
            .unwrap_or_default();
        let key = (machine.to_string(), nonce);
        let mut sending = shared.sending.lock().unwrap_or_else(|p| p.into_inner());
        sending.insert(key.clone()).then(|| Sending {
            shared: shared.clone(),
            key,
        })
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        let mut sending = self
            .shared
            .sending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        sending.remove(&self.key);
    }
}

async fn hold(shared: &Arc<Shared>, machine: Option<String>, length: usize) -> Result<Held, Reply> {
    if let Some(m) = &machine {
        let mut per = shared.per_machine.lock().unwrap_or_else(|p| p.into_inner());
        let held = per.entry(m.clone()).or_default();
        if *held + length > shared.config.machine_budget {
            let mut r = refuse(
                429,
                format!(
                    "machine {m} is sending {} bytes of bodies at once already, the most the vault holds for one machine is {}",
                    *held, shared.config.machine_budget
                ),
            );
            r.retry_after = Some(5);
            return Err(r);
        }
        *held += length;
    }
    // Reserved before the wait for the overall budget, so it must be given
    // back if that fails: build `Held` only once both are in hand.
    let kib = (length.div_ceil(1024)).max(1) as u32;
    let giveback = |shared: &Arc<Shared>| {
        if let Some(m) = &machine {
            let mut per = shared.per_machine.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(h) = per.get_mut(m) {
                *h = h.saturating_sub(length);
            }
        }
    };
    let permit = match tokio::time::timeout(
        shared.config.queue_wait,
        shared.bodies.clone().acquire_many_owned(kib),
    )
    .await
    {
        Ok(Ok(p)) => p,
        _ => {
            giveback(shared);
            let mut r = refuse(
                503,
                "the vault holds as many request bodies as it may: try again shortly",
            );
            r.retry_after = Some(5);
            return Err(r);
        }
    };
    Ok(Held {
        shared: shared.clone(),
        machine,
        bytes: length,
        _permit: permit,
    })
}

/// Reads exactly `length` bytes of body, refusing a body that stalls,
/// takes too long in all, or runs past its stated length.
async fn read_body(mut body: Incoming, length: usize, config: &Config) -> Result<Vec<u8>, Reply> {
    let mut out = Vec::with_capacity(length);
    let stalled = || {
        refuse(
            408,
            format!(
                "the body stalled: no byte for {} s",
                config.body_stall.as_secs()
            ),
        )
    };
    let whole = async {
        loop {
            let frame = tokio::time::timeout(
                config.body_stall,
                std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)),
            )
            .await
            .map_err(|_| stalled())?;
            match frame {
                None => break,
                Some(Err(e)) => {
                    return Err(refuse(400, format!("reading the body failed: {e}")));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if out.len() + data.len() > length {
                            return Err(refuse(400, "the body runs past its Content-Length"));
                        }
                        out.extend_from_slice(&data);
                    }
                }
            }
        }
        Ok(())
    };
    tokio::time::timeout(config.body_deadline, whole)
        .await
        .map_err(|_| {
            refuse(
                408,
                format!(
                    "the body took longer than {} s to arrive",
                    config.body_deadline.as_secs()
                ),
            )
        })??;
    if out.len() != length {
        return Err(refuse(400, "the body ended before its Content-Length"));
    }
    Ok(out)
}

/// One request, start to reply; logs its line.
async fn respond(
    shared: Arc<Shared>,
    request: hyper::Request<Incoming>,
    tracked: &Tracked,
) -> hyper::Response<Body> {
    let started = Instant::now();
    let method = request.method().as_str().to_string();
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let (reply, body_read) = answer(&shared, request, &method, &path, tracked).await;
    let note = reply
        .note
        .as_ref()
        .map(|n| format!(" {n}"))
        .unwrap_or_default();
    shared.log(&format!(
        "{method} {path} {} {:.3}ms{note}",
        reply.status,
        started.elapsed().as_secs_f64() * 1000.0
    ));
    let mut response = hyper::Response::builder()
        .status(reply.status)
        .header("content-type", "text/plain; charset=utf-8");
    if let Some(secs) = reply.retry_after {
        response = response.header("retry-after", secs.to_string());
    }
    if let Some(signature) = reply.signature {
        response = response.header(
            nd7_format::vault::HEADER_REPLY,
            nd7_format::vault::hex(&*signature),
        );
    }
    if !body_read {
        // The body was refused unread: the connection cannot carry another
        // request, and must not wait for the rest of this one.
        response = response.header("connection", "close");
    }
    let body = match reply.pull {
        None => Body::Full(Some(Bytes::from(reply.body))),
        Some(pull) => Body::Stream(stream_pull(shared.clone(), *pull)),
    };
    response.body(body).unwrap_or_else(|_| {
        let mut r = hyper::Response::new(Body::Full(Some(Bytes::from_static(b"vault error\n"))));
        *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

/// The reply, and whether the request's body (if any) was read.
async fn answer(
    shared: &Arc<Shared>,
    request: hyper::Request<Incoming>,
    method: &str,
    path: &str,
    tracked: &Tracked,
) -> (Reply, bool) {
    let max = match routes::max_body(method, path) {
        Ok(max) => max,
        Err(r) => return (r, false),
    };
    let (parts, body) = request.into_parts();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let mut request = Request {
        method: method.to_string(),
        path: path.to_string(),
        headers,
        body: Vec::new(),
    };
    let length = match body.size_hint().exact() {
        Some(n) => n as usize,
        None if max == 0 => return (refuse(413, "this route takes no body"), false),
        None => {
            return (refuse(411, "send the body with a Content-Length"), false);
        }
    };
    // A machine the vault knows, by a valid signature over the headers:
    // its request does not queue with the anonymous ones (which take a
    // bounded share of the storage queue). Its connection is not evicted
    // while the request is answered, and leaves the anonymous pool once
    // the request is proven whole (nonce spent): a replayed request
    // promotes nothing. An anonymous request protects nothing: a flood of
    // them, each waiting its turn, would otherwise make every anonymous
    // connection unevictable.
    let vouched = routes::vouches(&request, length, super::unix_now(), |id| {
        shared.known_machines().get(id).copied()
    });
    if vouched {
        tracked.busy(true);
    }
    let _anonymous = if !vouched && routes::anonymous(method, path) {
        match tokio::time::timeout(
            shared.config.queue_wait,
            shared.anonymous_jobs.clone().acquire_owned(),
        )
        .await
        {
            Ok(Ok(permit)) => Some(permit),
            _ => {
                let mut r = refuse(503, "the vault is busy: try again shortly");
                r.retry_after = Some(5);
                return (r, false);
            }
        }
    } else {
        None
    };
    if length > 0 {
        let head = request.clone();
        let admitted = shared
            .on_store(move |vault, store| vault.admit(store, &head, length))
            .await
            .and_then(|r| r);
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(r) => {
                shared.learn(&r);
                return (r, false);
            }
        };
        let machine = admitted.machine().map(str::to_string);
        // One connection per signed request: a captured header replayed on
        // many connections (its nonce is spent only once the body is read)
        // holds one of them, for the body timeout at most.
        let _sending = match &machine {
            Some(m) => match Sending::claim(shared, m, &request) {
                Some(s) => Some(s),
                None => {
                    return (
                        refuse(
                            409,
                            "this request is being sent on another connection already",
                        ),
                        false,
                    );
                }
            },
            None => None,
        };
        let _held = match hold(shared, machine, length).await {
            Ok(h) => h,
            Err(r) => return (r, false),
        };
        request.body = match read_body(body, length, &shared.config).await {
            Ok(b) => b,
            Err(r) => return (r, false),
        };
        let reply = shared
            .on_store(move |vault, store| vault.handle(store, &request))
            .await
            .unwrap_or_else(|r| r);
        shared.learn(&reply);
        // Promoted only once the request is proven whole (nonce spent), as
        // a request without a body is below: a header alone promotes nothing.
        if reply.proven {
            tracked.promote();
        }
        return (reply, true);
    }
    let reply = shared
        .on_store(move |vault, store| vault.handle(store, &request))
        .await
        .unwrap_or_else(|r| r);
    shared.learn(&reply);
    if reply.proven {
        tracked.promote();
    }
    (reply, true)
}

/// Streams a pull's batches or pieces, one storage round trip per frame,
/// one frame ahead of the peer at most, then the signed last frame over
/// them all. A storage error cuts the stream short, which the client sees
/// as a body that ended early, without its last frame.
fn stream_pull(
    shared: Arc<Shared>,
    pull: routes::Pull,
) -> mpsc::Receiver<Result<Bytes, io::Error>> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut after = None;
        let (mut frames, mut digest) = (0u64, blake3::Hasher::new());
        loop {
            let p = pull.clone();
            let next = shared
                .on_store(move |vault, store| vault.next_frame(store, &p, after))
                .await;
            let frame = match next {
                Ok(Ok(Some((at, frame)))) => {
                    after = Some(at);
                    frames += 1;
                    digest.update(&frame);
                    frame
                }
                Ok(Ok(None)) => {
                    let end = shared
                        .vault
                        .end_frame(&pull, frames, *digest.finalize().as_bytes());
                    let _ = tx.send(Ok(Bytes::from(end))).await;
                    return;
                }
                Ok(Err(e)) => {
                    shared.log(&format!(
                        "pull of machine {}, session {}: {e}; the reply was cut short",
                        pull.machine, pull.session
                    ));
                    let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
                    return;
                }
                Err(r) => {
                    let _ = tx
                        .send(Err(io::Error::other(
                            String::from_utf8_lossy(&r.body).into_owned(),
                        )))
                        .await;
                    return;
                }
            };
            if tx.send(Ok(Bytes::from(frame))).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// A stream whose writes fail once one has made no progress for `limit`:
/// a peer that stops reading cannot hold a connection, a task and a
/// buffered reply forever. Reads are not limited here: hyper keeps one
/// pending while a request is handled; the header and body deadlines
/// bound the reads that matter.
struct WriteStall<T> {
    inner: T,
    limit: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteStall<T> {
    fn new(inner: T, limit: Duration) -> WriteStall<T> {
        WriteStall {
            inner,
            limit,
            stalled: None,
        }
    }

    /// `poll`'s result, or a timeout error once it has been pending for
    /// longer than the limit.
    fn guard<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match poll {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let limit = self.limit;
                let sleep = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                ready!(sleep.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer stopped reading",
                )))
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteStall<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteStall<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, poll)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.guard(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
