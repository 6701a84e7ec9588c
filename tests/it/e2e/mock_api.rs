//! A local stand-in for the Anthropic Messages API that plays a scripted
//! session. Claude Code, pointed at it by `ANTHROPIC_BASE_URL`, runs real
//! hooks and real tools against it with no account and no network.
//!
//! Each main-loop request (one that carries `tools`) is answered with the next
//! scripted turn as a stream of server-sent events; when the script runs out,
//! the answer is a plain "done". Every main-loop request body is kept, so a
//! test can read the tool results Claude Code sent back.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// One block of an assistant turn.
#[derive(Clone, Debug)]
pub enum Block {
    Text(String),
    /// A tool call: tool name and its input.
    Tool(&'static str, Value),
}

/// A Bash tool call.
pub fn bash(command: &str) -> Block {
    Block::Tool(
        "Bash",
        json!({ "command": command, "description": "scripted" }),
    )
}

#[derive(Default)]
struct Shared {
    turns: Vec<Vec<Block>>,
    next_turn: usize,
    /// A subagent's own script: requests whose first message contains the
    /// marker (the prompt the main script gave the subagent) are answered
    /// from it, so a subagent running beside the main loop cannot take its
    /// turns.
    subagent: Option<(String, Vec<Vec<Block>>)>,
    next_subagent_turn: usize,
    next_tool_id: usize,
    requests: Vec<Value>,
    /// The tool-use ids handed out, in order.
    tool_ids: Vec<String>,
}

pub struct MockApi {
    pub url: String,
    shared: Arc<Mutex<Shared>>,
}

impl MockApi {
    /// Starts serving `turns` on a free port on 127.0.0.1.
    pub fn start(turns: Vec<Vec<Block>>) -> MockApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
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
        MockApi { url, shared }
    }

    /// [`MockApi::start`], with a subagent whose first message contains
    /// `marker` answered from `turns` of its own.
    pub fn start_with_subagent(
        main: Vec<Vec<Block>>,
        marker: &str,
        turns: Vec<Vec<Block>>,
    ) -> MockApi {
        let api = MockApi::start(main);
        api.lock().subagent = Some((marker.to_string(), turns));
        api
    }

    /// How many of the subagent's turns were played.
    pub fn subagent_turns_played(&self) -> usize {
        self.lock().next_subagent_turn
    }

    /// Every main-loop request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// The tool-use ids the script handed out, in order.
    pub fn tool_ids(&self) -> Vec<String> {
        self.lock().tool_ids.clone()
    }

    /// How many scripted turns were played.
    pub fn turns_played(&self) -> usize {
        self.lock().next_turn
    }

    /// The `tool_result` blocks Claude Code sent back, by tool-use id.
    pub fn tool_results(&self) -> Vec<(String, String, bool)> {
        let mut out = Vec::new();
        for req in self.requests() {
            let Some(messages) = req["messages"].as_array() else {
                continue;
            };
            for msg in messages.iter().filter(|m| m["role"] == "user") {
                let Some(blocks) = msg["content"].as_array() else {
                    continue;
                };
                for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                    let id = b["tool_use_id"].as_str().unwrap_or_default().to_string();
                    let text = match &b["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => parts
                            .iter()
                            .filter_map(|p| p["text"].as_str())
                            .collect::<Vec<_>>()
                            .join("\n"),
                        other => other.to_string(),
                    };
                    let is_error = b["is_error"].as_bool().unwrap_or(false);
                    if !out
                        .iter()
                        .any(|(seen, _, _): &(String, String, bool)| *seen == id)
                    {
                        out.push((id, text, is_error));
                    }
                }
            }
        }
        out
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
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    let mut stream = stream;
    if path.starts_with("/v1/messages/count_tokens") {
        return respond_json(&mut stream, &json!({ "input_tokens": 10 }));
    }
    if !path.starts_with("/v1/messages") {
        return respond_json(&mut stream, &json!({}));
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let main_loop = request["tools"].as_array().is_some_and(|t| !t.is_empty());
    let blocks = if main_loop {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        let first = request["messages"][0].to_string();
        let sub = s
            .subagent
            .as_ref()
            .is_some_and(|(marker, _)| first.contains(marker.as_str()));
        let turn = if sub {
            let n = s.next_subagent_turn;
            let turn = s.subagent.as_ref().and_then(|(_, t)| t.get(n).cloned());
            if turn.is_some() {
                s.next_subagent_turn += 1;
            }
            turn
        } else {
            s.requests.push(request.clone());
            let turn = s.turns.get(s.next_turn).cloned();
            if turn.is_some() {
                s.next_turn += 1;
            }
            turn
        };
        let turn = turn.unwrap_or_else(|| vec![Block::Text("done".into())]);
        // Give every tool call its id now, under the lock.
        turn.into_iter()
            .map(|b| match b {
                Block::Tool(name, input) => {
                    s.next_tool_id += 1;
                    let id = format!("toolu_e2e_{:04}", s.next_tool_id);
                    s.tool_ids.push(id.clone());
                    (Some(id), Block::Tool(name, input))
                }
                text => (None, text),
            })
            .collect::<Vec<_>>()
    } else {
        vec![(None, Block::Text("ok".into()))]
    };
    if request["stream"] == true {
        respond_stream(&mut stream, &request, &blocks)
    } else {
        respond_message(&mut stream, &request, &blocks)
    }
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

fn model(request: &Value) -> Value {
    request
        .get("model")
        .cloned()
        .unwrap_or(json!("claude-sonnet-4-5"))
}

fn stop_reason(blocks: &[(Option<String>, Block)]) -> &'static str {
    if blocks.iter().any(|(_, b)| matches!(b, Block::Tool(..))) {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn respond_stream(
    stream: &mut TcpStream,
    request: &Value,
    blocks: &[(Option<String>, Block)],
) -> std::io::Result<()> {
    let mut out = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    );
    let mut event = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_e2e", "type": "message", "role": "assistant", "model": model(request),
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    );
    for (index, (id, block)) in blocks.iter().enumerate() {
        match block {
            Block::Text(text) => {
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
                );
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": text}}),
                );
            }
            Block::Tool(name, input) => {
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                );
                event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                );
            }
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(blocks), "stop_sequence": null},
            "usage": {"output_tokens": 5}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    stream.write_all(out.as_bytes())?;
    stream.flush()
}

fn respond_message(
    stream: &mut TcpStream,
    request: &Value,
    blocks: &[(Option<String>, Block)],
) -> std::io::Result<()> {
    let content: Vec<Value> = blocks
        .iter()
        .map(|(id, b)| match b {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Tool(name, input) => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        })
        .collect();
    respond_json(
        stream,
        &json!({"id": "msg_e2e", "type": "message", "role": "assistant", "model": model(request),
            "content": content, "stop_reason": stop_reason(blocks), "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}}),
    )
}

fn respond_json(stream: &mut TcpStream, value: &Value) -> std::io::Result<()> {
    let body = value.to_string();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
