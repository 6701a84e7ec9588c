//! The vault's HTTP transport: tiny_http with a few worker threads. It reads
//! each request whole, within bounds ([`vault::MAX_BODY_BYTES`], a deadline),
//! hands it to [`routes::Vault::handle`], and writes the reply and one log
//! line. TLS and connection timeouts belong to a reverse proxy in front
//! (ADR-0022).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Config;
use super::routes::{self, Reply, Request, reply};
use crate::vault;

/// Serves requests on `server` until `stop` is set. Each request's line
/// (method, path, status, milliseconds, and what a refusal concerned) goes
/// to `log`.
pub fn serve(
    server: &tiny_http::Server,
    vault: &routes::Vault,
    config: &Config,
    stop: &AtomicBool,
    log: &(impl Fn(&str) + Send + Sync),
) {
    std::thread::scope(|scope| {
        for _ in 0..config.workers.max(1) {
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(200))
                    else {
                        continue;
                    };
                    let started = Instant::now();
                    let method = request.method().as_str().to_string();
                    let path = request.url().to_string();
                    let r = match read_body(config.body_deadline, &mut request) {
                        Ok(body) => vault.handle(&Request {
                            method: method.clone(),
                            path: path.clone(),
                            headers: request
                                .headers()
                                .iter()
                                .map(|h| {
                                    (h.field.as_str().as_str().to_string(), h.value.to_string())
                                })
                                .collect(),
                            body,
                        }),
                        Err(r) => r,
                    };
                    let status = r.status;
                    let response = tiny_http::Response::from_data(r.body)
                        .with_status_code(status)
                        .with_header(tiny_http::Header {
                            field: "Content-Type".parse().unwrap_or_else(|_| unreachable!()),
                            value: "text/plain; charset=utf-8"
                                .parse()
                                .unwrap_or_else(|_| unreachable!()),
                        });
                    let _ = request.respond(response);
                    let note = r.note.map(|n| format!(" {n}")).unwrap_or_default();
                    log(&format!(
                        "{method} {path} {status} {:.3}ms{note}",
                        started.elapsed().as_secs_f64() * 1000.0
                    ));
                }
            });
        }
    });
}

fn read_body(deadline: Duration, request: &mut tiny_http::Request) -> Result<Vec<u8>, Reply> {
    let too_large = || {
        reply(
            413,
            format!(
                "refused: the body is over the vault's {}-byte limit",
                vault::MAX_BODY_BYTES
            ),
        )
    };
    if request
        .body_length()
        .is_some_and(|n| n > vault::MAX_BODY_BYTES)
    {
        return Err(too_large());
    }
    let started = Instant::now();
    let mut body = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let reader = request.as_reader();
    loop {
        let n = reader
            .read(&mut chunk)
            .map_err(|e| reply(400, format!("refused: reading the body failed: {e}")))?;
        if n == 0 {
            return Ok(body);
        }
        if body.len() + n > vault::MAX_BODY_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk[..n]);
        if started.elapsed() > deadline {
            return Err(reply(
                408,
                format!(
                    "refused: the body took longer than {} s to arrive",
                    deadline.as_secs()
                ),
            ));
        }
    }
}
