//! The fuzz targets' bodies, shared by the libFuzzer binaries (`fuzz_targets/`) and the
//! corpus replay run by `cargo test` (`crates/toolgate-server/tests/fuzz_corpus.rs`).
//! Each takes any bytes and must neither panic nor break the invariant it asserts.

// Each libFuzzer binary calls one of these.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Component;

use serde_json::{Value, json};
use toolgate_agent::protocol::Protocol;
use toolgate_agent::provider::{ModelRequest, ToolChoice, ToolDecl};

/// JSON-RPC decoding as `/mcp` does it, and the classification of an undecodable
/// request's method (known method with bad params → -32602, else -32601).
pub fn jsonrpc(data: &[u8]) {
    if let Ok(message) = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(data) {
        // What decodes re-encodes.
        let text = serde_json::to_string(&message).expect("a decoded message encodes");
        assert!(serde_json::from_str::<Value>(&text).is_ok());
    }
    if let Ok(Value::Object(raw)) = serde_json::from_slice::<Value>(data)
        && let Some(method) = raw.get("method").and_then(Value::as_str)
    {
        let _ = toolgate_mcp::is_known_method(method);
    }
}

fn decls() -> Vec<ToolDecl> {
    let specs = [
        (
            "read_file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        ),
        ("fx.search", json!({"type": "object"})),
    ];
    specs
        .into_iter()
        .map(|(name, parameters)| ToolDecl {
            name: name.to_owned(),
            wire_name: name.replace('.', "_"),
            description: format!("{name} tool"),
            parameters,
        })
        .collect()
}

fn text_protocol(protocol: Protocol, data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = protocol.parse(text, &decls(), "t1_");
    for (n, call) in parsed.calls.iter().enumerate() {
        assert_eq!(call.id, format!("t1_{n}"), "calls are numbered in order");
        // Arguments are an object, or the raw text with what is wrong with it.
        assert!(
            call.arguments.is_object() || call.malformed.is_some(),
            "{call:?}"
        );
    }
}

/// The ReAct text protocol's parser.
pub fn react(data: &[u8]) {
    text_protocol(Protocol::React, data);
}

/// The XML text protocol's parser.
pub fn xml(data: &[u8]) {
    text_protocol(Protocol::Xml, data);
}

/// Each provider's response decoder, on the same body.
pub fn providers(data: &[u8]) {
    streams(data);
    let Ok(raw) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let tools = decls();
    let request = ModelRequest {
        model: "m",
        system: None,
        messages: &[],
        tools: &tools,
        tool_choice: ToolChoice::Auto,
        parallel_tool_calls: true,
        temperature: None,
        max_tokens: None,
        output_schema: None,
    };
    use toolgate_agent::provider::WireFormat;
    use toolgate_agent::provider::{anthropic, gemini, ollama, openai};
    for decode in [
        openai::OpenAi::decode,
        anthropic::Anthropic::decode,
        gemini::Gemini::decode,
        ollama::Ollama::decode,
    ] {
        if let Ok(turn) = decode(&request, raw.clone()) {
            for call in &turn.message.tool_calls {
                assert!(
                    call.arguments.is_object() || call.malformed.is_some(),
                    "{call:?}"
                );
            }
        }
    }
}

/// The bytes as each provider's stream (SSE or lines), framed and folded: never a panic,
/// and what a fold finishes is a reply its decoder reads or refuses cleanly.
fn streams(data: &[u8]) {
    use toolgate_agent::provider::stream::{Fold, Framer, Framing};
    use toolgate_agent::provider::{anthropic, gemini, ollama, openai};
    fn run<F: Fold>(data: &[u8], framing: Framing) -> Option<Value> {
        let mut framer = Framer::new(framing);
        let mut fold = F::default();
        let sink = |_| {};
        let mid = data.len() / 2;
        let mut messages = framer.push(&data[..mid]);
        messages.extend(framer.push(&data[mid..]));
        messages.extend(framer.finish());
        for message in messages {
            let Ok(value) = serde_json::from_str::<Value>(&message) else {
                continue;
            };
            fold.push(value, &sink).ok()?;
        }
        fold.finish().ok()
    }
    let _ = run::<openai::Fold>(data, Framing::Sse);
    let _ = run::<anthropic::Fold>(data, Framing::Sse);
    let _ = run::<gemini::Fold>(data, Framing::Sse);
    let _ = run::<ollama::Fold>(data, Framing::Ndjson);
}

/// A JWT's header as the gateway reads it before verifying anything, and the
/// roles/scopes claim shapes.
pub fn jwt(data: &[u8]) {
    if let Ok(token) = std::str::from_utf8(data)
        && let Ok(header) = toolgate_server::jwt::header(token)
    {
        assert!(header.crit.is_none(), "critical extensions are refused");
    }
    if let Ok(claim) = serde_json::from_slice::<Value>(data) {
        for s in toolgate_server::jwt::strings(Some(&claim)) {
            assert!(
                !s.is_empty() || claim.is_array(),
                "split strings are never empty"
            );
        }
    }
}

/// The SSRF classifier, differentially: `is_public` against a second classifier written
/// from the IANA special-purpose registries; and a URL whose host the `url` crate takes
/// for a name must not be an IP literal by the standard library's parser (else it would
/// skip the address check and go to DNS as a "name").
pub fn ssrf(data: &[u8]) {
    if data.len() >= 4 {
        let v4 = Ipv4Addr::new(data[0], data[1], data[2], data[3]);
        assert_eq!(
            toolgate_tools::egress::is_public(IpAddr::V4(v4)),
            public_v4(v4),
            "{v4}"
        );
    }
    if data.len() >= 16 {
        let bytes: [u8; 16] = data[..16].try_into().expect("16 bytes");
        let v6 = Ipv6Addr::from(bytes);
        assert_eq!(
            toolgate_tools::egress::is_public(IpAddr::V6(v6)),
            public_v6(v6),
            "{v6}"
        );
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(url) = url::Url::parse(text)
        && let Some(url::Host::Domain(name)) = url.host()
    {
        assert!(
            name.parse::<IpAddr>().is_err(),
            "{text:?} gives the name {name:?}"
        );
        assert!(
            name.trim_matches(['[', ']']).parse::<Ipv6Addr>().is_err(),
            "{text:?} gives the name {name:?}"
        );
    }
}

fn nets(list: &[&str]) -> Vec<ipnet::IpNet> {
    list.iter().map(|n| n.parse().expect("a CIDR")).collect()
}

/// Not globally reachable, per the IANA IPv4 special-purpose registry (and multicast,
/// reserved, broadcast).
fn public_v4(ip: Ipv4Addr) -> bool {
    let special = nets(&[
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    ]);
    !special.iter().any(|n| n.contains(&IpAddr::V4(ip)))
}

/// IPv6: the special-purpose ranges, and addresses carrying an IPv4 address (mapped,
/// NAT64, 6to4) judged by that address.
fn public_v6(ip: Ipv6Addr) -> bool {
    let addr = IpAddr::V6(ip);
    let within = |cidr: &str| {
        cidr.parse::<ipnet::IpNet>()
            .expect("a CIDR")
            .contains(&addr)
    };
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if within("::ffff:0:0/96") {
        return public_v4(embedded(s[6], s[7]));
    }
    if within("64:ff9b::/96") {
        return public_v4(embedded(s[6], s[7]));
    }
    if within("2002::/16") {
        return public_v4(embedded(s[1], s[2]));
    }
    let special = nets(&[
        "::/96",
        "ff00::/8",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "2001:db8::/32",
        "2001::/32",
    ]);
    !special.iter().any(|n| n.contains(&addr))
}

/// The workspace path check: whatever it accepts is relative, climbs nowhere and is
/// normalized.
pub fn workspace_path(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(path) = toolgate_tools::workspace::relative_path(text) {
        assert!(path.is_relative(), "{text:?} → {path:?}");
        if path.as_os_str() != "." {
            assert!(
                path.components().all(|c| matches!(c, Component::Normal(_))),
                "{text:?} → {path:?}"
            );
        }
    }
}

/// The SSE parser that reads an upstream's Streamable HTTP responses (`sse-stream`, under
/// rmcp's client). The first byte says where the rest is cut into chunks, as the network
/// might cut it: the events up to the first error must not depend on the cuts, and each
/// event's data is decoded as rmcp decodes it (what decodes re-encodes).
pub fn upstream_sse(data: &[u8]) {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let whole = sse_events(vec![body.to_vec()]);
    let step = usize::from(cut % 16) + 1;
    let chunks: Vec<Vec<u8>> = body.chunks(step).map(<[u8]>::to_vec).collect();
    let cut = sse_events(chunks);
    if whole.last().is_some_and(Result::is_err) {
        // sse-stream 0.2.6 reports a bad line before the complete events that came in the
        // same chunk (`corpus/upstream_sse/error_hides_earlier_event`): a stream that
        // fails fails the same way, and fewer events may precede the error when the bytes
        // come in one piece. rmcp ends the stream at the error either way.
        assert_eq!(whole.last(), cut.last(), "chunks of {step} bytes");
        assert!(whole.len() <= cut.len(), "chunks of {step} bytes");
        assert_eq!(whole[..whole.len() - 1], cut[..whole.len() - 1]);
    } else {
        assert_eq!(whole, cut, "chunks of {step} bytes");
    }
    for data in whole.iter().flatten().filter_map(|e| e.data.as_deref()) {
        if let Ok(message) = serde_json::from_str::<rmcp::model::ServerJsonRpcMessage>(data) {
            let text = serde_json::to_string(&message).expect("a decoded message encodes");
            assert!(serde_json::from_str::<Value>(&text).is_ok());
        }
    }
}

/// The events parsed from `chunks`, up to and including the first error.
fn sse_events(chunks: Vec<Vec<u8>>) -> Vec<Result<sse_stream::Sse, String>> {
    use futures::StreamExt;
    let body = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(std::io::Cursor::new(c))),
    );
    let mut stream = sse_stream::SseStream::from_bytes_stream(body);
    futures::executor::block_on(async {
        let mut events = Vec::new();
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            events.push(item.map_err(|e| e.to_string()));
            if failed {
                break;
            }
        }
        events
    })
}
