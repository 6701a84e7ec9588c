//! Properties over random payloads: whatever Claude Code sends and in
//! whatever order appends, crashes and verifies interleave, every session's
//! chain verifies, no entry is lost or doubled, and every stored body gives
//! back the payload it came from.

use std::collections::BTreeMap;

use nd7_core::hook::{Event, HookEvent, Payload};
use proptest::prelude::*;
use serde_json::{Map, Value};

use crate::common::*;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((".{0,8}", inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn event_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(HookEvent::NAMES).prop_map(str::to_string),
        1 => "[A-Za-z]{1,12}",
    ]
}

fn member_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "tool_name",
            "tool_input",
            "tool_use_id",
            "prompt",
            "source",
            "reason",
            "cwd",
            "argv",
            "paths",
            "ok",
            "duration_ms",
            "error",
            "last_assistant_message",
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,10}",
    ]
}

fn tool_input() -> impl Strategy<Value = Value> {
    prop_oneof![
        ".*".prop_map(|c| serde_json::json!({ "command": c })),
        ".*".prop_map(|p| serde_json::json!({ "file_path": p, "content": "x" })),
        json_value(),
    ]
}

/// A payload for one of three sessions.
fn payload() -> impl Strategy<Value = (usize, Map<String, Value>)> {
    (
        0..3usize,
        event_name(),
        prop::option::of("[A-Za-z]{1,6}"),
        prop::option::of(tool_input()),
        prop::collection::vec((member_name(), json_value()), 0..4),
    )
        .prop_map(|(session, name, tool, input, extra)| {
            let mut m = Map::new();
            m.insert(
                "session_id".into(),
                Value::String(format!("sess-{session}")),
            );
            m.insert("hook_event_name".into(), Value::String(name));
            if let Some(tool) = tool {
                m.insert("tool_name".into(), Value::String(tool));
            }
            if let Some(input) = input {
                m.insert("tool_input".into(), input);
            }
            for (k, v) in extra {
                if k != "session_id" {
                    m.insert(k, v);
                }
            }
            (session, m)
        })
}

#[derive(Clone, Debug)]
enum Op {
    Append(usize, Map<String, Value>),
    /// An append whose process died before rewriting head.
    Crash(usize, Map<String, Value>),
    Verify(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => payload().prop_map(|(s, p)| Op::Append(s, p)),
        2 => payload().prop_map(|(s, p)| Op::Crash(s, p)),
        1 => (0..3usize).prop_map(Op::Verify),
    ]
}

/// The payload an entry's body says it came from.
fn payload_of(entry: &Value) -> Value {
    let body = entry["body"].clone();
    if entry["kind"] == "hook" {
        return body["raw"].clone();
    }
    let mut body = body.as_object().cloned().unwrap_or_default();
    match entry["kind"].as_str() {
        Some("tool_call") => {
            body.shift_remove("argv");
            body.shift_remove("paths");
        }
        Some("tool_result") => {
            body.shift_remove("ok");
        }
        _ => {}
    }
    Value::Object(body)
}

fn to_event(p: &Map<String, Value>) -> Event {
    let text = serde_json::to_vec(p).expect("serializes");
    Event::new(
        &invocation(),
        Payload::parse(&text).expect("has a session id"),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_of_appends_crashes_and_verifies_keeps_every_chain(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        let state = State::new();
        let mut expected: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Append(s, p) | Op::Crash(s, p) => {
                    let log = state.log(&format!("sess-{s}"));
                    let appended = log.append(&to_event(p)).expect("append");
                    expected.entry(*s).or_default().push(Value::Object(p.clone()));
                    if matches!(op, Op::Crash(..)) {
                        // Leave head where a death after the entry's write
                        // leaves it: on the entry before (or absent).
                        if appended.seq == 0 {
                            std::fs::remove_file(log.head_path()).expect("drop head");
                        } else {
                            let last = entries(&log).pop().expect("an entry");
                            let prev = last["prev"].as_str().expect("prev");
                            std::fs::write(log.head_path(), format!("{} {prev}\n", appended.seq - 1))
                                .expect("write head");
                        }
                    }
                }
                Op::Verify(s) => {
                    let log = state.log(&format!("sess-{s}"));
                    match expected.get(s) {
                        // Never written: no session, not an empty chain.
                        None => {
                            let refused = matches!(
                                log.verify(1),
                                Err(nd7_core::session_log::VerifyError::NoSession { .. })
                            );
                            prop_assert!(refused, "no session, not an empty chain");
                        }
                        Some(payloads) => {
                            let v = log.verify(1).expect("verifies at any point");
                            prop_assert_eq!(v.entries as usize, payloads.len());
                        }
                    }
                }
            }
        }
        for (s, payloads) in &expected {
            let log = state.log(&format!("sess-{s}"));
            prop_assert_eq!(log.verify(1).expect("clean").entries as usize, payloads.len());
            for parts in 2..=4 {
                prop_assert_eq!(log.verify_in(parts).expect("clean").entries as usize, payloads.len());
            }
            let got: Vec<Value> = entries(&log).iter().map(payload_of).collect();
            prop_assert_eq!(&got, payloads);
        }
    }

    #[test]
    fn threads_racing_with_random_payloads_lose_nothing(
        batches in prop::collection::vec(prop::collection::vec(payload(), 1..12), 2..5)
    ) {
        let state = State::new();
        std::thread::scope(|scope| {
            for batch in &batches {
                let state = &state;
                scope.spawn(move || {
                    for (_, p) in batch {
                        let mut p = p.clone();
                        p.insert("session_id".into(), Value::String("shared".into()));
                        state.log("shared").append(&to_event(&p)).expect("append");
                    }
                });
            }
        });
        let log = state.log("shared");
        let total: usize = batches.iter().map(Vec::len).sum();
        prop_assert_eq!(log.verify(1).expect("clean").entries as usize, total);
        let mut got: Vec<String> = entries(&log).iter().map(|e| payload_of(e).to_string()).collect();
        let mut want: Vec<String> = batches
            .iter()
            .flatten()
            .map(|(_, p)| {
                let mut p = p.clone();
                p.insert("session_id".into(), Value::String("shared".into()));
                Value::Object(p).to_string()
            })
            .collect();
        got.sort();
        want.sort();
        prop_assert_eq!(got, want);
    }
}

/// A Codex payload: its twelve event names or another, its tools, and
/// members that collide with what nd7 adds.
fn codex_payload() -> impl Strategy<Value = Map<String, Value>> {
    (
        prop_oneof![
            4 => prop::sample::select(nd7_core::codex::hook::CodexEvent::NAMES).prop_map(str::to_string),
            1 => "[A-Za-z]{1,12}",
        ],
        prop::option::of(prop::sample::select(vec!["Bash", "apply_patch", "mcp__x__y"])),
        prop::option::of(tool_input()),
        prop::collection::vec(
            (
                prop_oneof![
                    member_name(),
                    prop::sample::select(vec!["agent", "outcome", "turn_id", "model"]).prop_map(str::to_string),
                ],
                json_value(),
            ),
            0..4,
        ),
    )
        .prop_map(|(name, tool, input, extra)| {
            let mut m = Map::new();
            m.insert("session_id".into(), Value::String("codex-sess".into()));
            m.insert("hook_event_name".into(), Value::String(name));
            if let Some(tool) = tool {
                m.insert("tool_name".into(), Value::String(tool.into()));
            }
            if let Some(input) = input {
                m.insert("tool_input".into(), input);
            }
            for (k, v) in extra {
                if k != "session_id" {
                    m.insert(k, v);
                }
            }
            m
        })
}

proptest! {
    /// Codex's bodies follow ADR-0009 too: taking out what nd7 added gives
    /// the payload back, whatever the rollout said.
    #[test]
    fn every_codex_body_gives_its_payload_back(
        p in codex_payload(),
        first in any::<bool>(),
        exit in prop::option::of(any::<i64>()),
    ) {
        use nd7_core::codex::hook::{self as codex, AgentInfo, Facts, Outcome};
        let payload = Payload::parse(&serde_json::to_vec(&p).expect("json")).expect("parses");
        let facts = Facts {
            agent: first.then(|| AgentInfo {
                version: Some("0.171.0".into()),
                originator: None,
                why: None,
            }),
            outcome: Some(match exit {
                Some(code) => Outcome::Known { status: "completed".into(), exit_code: Some(code) },
                None => Outcome::Unknown("gone".into()),
            }),
        };
        let ev = codex::event(&invocation(), payload, facts);
        prop_assert_eq!(ev.source, "intent:codex");
        let body: Value = serde_json::from_str(ev.body.get()).expect("body");
        let mut body = body.as_object().cloned().expect("object");
        // Never over a member of the payload: beside `raw`, or where the
        // payload has no `agent` of its own.
        let added_agent = first && (ev.kind.as_str() == "hook" || !p.contains_key("agent"));
        if ev.kind.as_str() == "hook" {
            if added_agent {
                body.shift_remove("agent");
            }
            prop_assert_eq!(body.len(), 2);
            prop_assert_eq!(&body["raw"], &Value::Object(p));
            return Ok(());
        }
        let derived: &[&str] = match ev.kind.as_str() {
            "tool_call" => &["argv", "paths"],
            "tool_result" => &["ok", "outcome"],
            "session_start" => &["agent"],
            _ => &[],
        };
        for m in derived {
            prop_assert!(!p.contains_key(*m), "a colliding payload is recorded as hook");
            body.shift_remove(*m);
        }
        if added_agent {
            body.shift_remove("agent");
        }
        prop_assert_eq!(Value::Object(body), Value::Object(p));
    }
}
