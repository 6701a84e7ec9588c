//! A local stand-in for the OpenAI Responses API that plays a scripted
//! session: Codex, given a model provider whose base URL is this server
//! (`wire_api = "responses"`), runs real hooks and real tools against it with
//! no account and no network.
//!
//! Each `POST /v1/responses` is answered with the next scripted turn as a
//! stream of server-sent events (`response.created`, one
//! `response.output_item.done` per item, `response.completed`); when the
//! script runs out the answer is a plain "done". Every request body is kept,
//! so a test can read the tool outputs Codex sent back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// One output item of a scripted model turn.
#[derive(Clone, Debug)]
pub enum Item {
    Message(String),
    /// A shell call (`exec_command`), run in Codex's sandbox.
    Shell(String),
    /// A shell call asking to leave the sandbox, which `codex exec` (approval
    /// policy "never") refuses without running it.
    ShellEscalated(String),
    /// An `apply_patch` call (a freeform tool: the patch is the input).
    Patch(String),
    /// Any function call: the tool's name and its arguments. `{SESSION}` in
    /// the arguments becomes the last unified-exec session id a tool output
    /// named ("session ID N"), so a script can write to a process it started.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Call(String, Value),
    /// An output item as it is, with `call_id` set to the next call id.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Raw(Value),
    /// Not an item: the turn is answered only once this file exists (at most
    /// two minutes), so a test can act between two calls.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Gate(std::path::PathBuf),
}

#[derive(Default)]
struct Shared {
    turns: Vec<Vec<Item>>,
    next_turn: usize,
    next_call: usize,
    requests: Vec<Value>,
    /// The call ids handed out, in order.
    call_ids: Vec<String>,
}

pub struct MockResponses {
    /// The provider's base URL, `http://127.0.0.1:PORT/v1`.
    pub url: String,
    shared: Arc<Mutex<Shared>>,
}

impl MockResponses {
    /// Starts serving `turns` on a free port on 127.0.0.1.
    pub fn start(turns: Vec<Vec<Item>>) -> MockResponses {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        let shared = Arc::new(Mutex::new(Shared {
            turns,
            ..Shared::default()
        }));
        let for_thread = Arc::clone(&shared);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&for_thread);
                std::thread::spawn(move || {
                    let _ = serve(stream, &shared);
                });
            }
        });
        MockResponses { url, shared }
    }

    /// How many scripted turns were played.
    pub fn turns_played(&self) -> usize {
        self.lock().next_turn
    }

    /// The call ids the script handed out, in order.
    pub fn call_ids(&self) -> Vec<String> {
        self.lock().call_ids.clone()
    }

    /// The output Codex sent back for each call, by call id.
    pub fn outputs(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for req in self.lock().requests.iter() {
            for item in req["input"].as_array().into_iter().flatten() {
                let kind = item["type"].as_str().unwrap_or_default();
                if kind != "function_call_output" && kind != "custom_tool_call_output" {
                    continue;
                }
                let id = item["call_id"].as_str().unwrap_or_default().to_string();
                let text = match &item["output"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if !out.iter().any(|(seen, _)| *seen == id) {
                    out.push((id, text));
                }
            }
        }
        out
    }

    /// Every request body Codex sent, as one text.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn requests_text(&self) -> String {
        self.lock()
            .requests
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn serve(stream: TcpStream, shared: &Mutex<Shared>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut content_length = 0usize;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)?
    } else {
        let mut body = vec![0u8; content_length];
        reader.read_exact(&mut body)?;
        body
    };
    let mut words = request_line.split_whitespace();
    let method = words.next().unwrap_or_default().to_string();
    let path = words.next().unwrap_or("/").to_string();
    let mut stream = stream;
    if method != "POST" || !path.starts_with("/v1/responses") {
        return respond(&mut stream, "application/json", b"{}");
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // Kept before any gate, so a test waiting at one sees what led to it.
    let gate = {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        s.requests.push(request);
        s.turns.get(s.next_turn).and_then(|turn| {
            turn.iter().find_map(|item| match item {
                Item::Gate(path) => Some(path.clone()),
                _ => None,
            })
        })
    };
    if let Some(gate) = gate {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !gate.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let (turn_no, items) = {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        let turn_no = s.next_turn;
        let turn = s.turns.get(turn_no).cloned();
        if turn.is_some() {
            s.next_turn += 1;
        }
        let turn = turn.unwrap_or_else(|| vec![Item::Message("done".into())]);
        let session = last_session(&s.requests);
        let items: Vec<Value> = turn
            .into_iter()
            .filter(|item| !matches!(item, Item::Gate(_)))
            .enumerate()
            .map(|(j, item)| {
                let mut call_id = || {
                    s.next_call += 1;
                    let id = format!("call_e2e_{:04}", s.next_call);
                    s.call_ids.push(id.clone());
                    id
                };
                match item {
                    Item::Message(text) => json!({
                        "type": "message", "role": "assistant", "id": format!("msg_{turn_no}_{j}"),
                        "content": [{"type": "output_text", "text": text}]
                    }),
                    Item::Shell(cmd) => json!({
                        "type": "function_call", "id": format!("fc_{turn_no}_{j}"),
                        "call_id": call_id(), "name": "exec_command",
                        "arguments": json!({"cmd": cmd}).to_string()
                    }),
                    Item::ShellEscalated(cmd) => json!({
                        "type": "function_call", "id": format!("fc_{turn_no}_{j}"),
                        "call_id": call_id(), "name": "exec_command",
                        "arguments": json!({
                            "cmd": cmd, "sandbox_permissions": "require_escalated",
                            "justification": "scripted"
                        }).to_string()
                    }),
                    Item::Call(name, arguments) => json!({
                        "type": "function_call", "id": format!("fc_{turn_no}_{j}"),
                        "call_id": call_id(), "name": name,
                        "arguments": arguments.to_string().replace("\"{SESSION}\"", &session),
                    }),
                    Item::Raw(mut item) => {
                        item["call_id"] = call_id().into();
                        item
                    }
                    Item::Patch(patch) => json!({
                        "type": "custom_tool_call", "id": format!("ctc_{turn_no}_{j}"),
                        "call_id": call_id(), "name": "apply_patch", "input": patch
                    }),
                    Item::Gate(_) => unreachable!("gates are filtered out above"),
                }
            })
            .collect();
        (turn_no, items)
    };
    let mut out = String::new();
    let mut event = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    let id = format!("resp_e2e_{turn_no}");
    event(
        "response.created",
        json!({"type": "response.created", "response": {"id": id}}),
    );
    for (index, item) in items.into_iter().enumerate() {
        event(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    event(
        "response.completed",
        json!({"type": "response.completed", "response": {"id": id, "usage": {
            "input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
            "output_tokens_details": null, "total_tokens": 15}}}),
    );
    respond(&mut stream, "text/event-stream", out.as_bytes())
}

/// The last "session ID N" a tool output holds, or "0".
fn last_session(requests: &[Value]) -> String {
    let text = requests.last().map(Value::to_string).unwrap_or_default();
    text.rmatch_indices("session ID ")
        .next()
        .map(|(at, m)| {
            text[at + m.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "0".into())
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let n =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if n == 0 {
            let mut end = String::new();
            reader.read_line(&mut end)?;
            return Ok(body);
        }
        let mut chunk = vec![0u8; n + 2];
        reader.read_exact(&mut chunk)?;
        body.extend_from_slice(&chunk[..n]);
    }
}

fn respond(stream: &mut TcpStream, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()
}
