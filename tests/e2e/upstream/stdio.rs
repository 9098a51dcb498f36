//! Upstream MCP servers over stdio: joining the registry, the official reference servers, garbage on stdout, tools that change or go away.

use super::*;

#[tokio::test]
async fn a_stdio_upstream_joins_the_registry_and_is_called_through_the_executor() {
    let dir = sdk_clients();
    let log = tempfile::NamedTempFile::new().expect("log file");
    let python = dir.join(".venv/bin/python").display().to_string();
    let script = dir.join("fixture_server.py").display().to_string();
    let log_path = log.path().display().to_string();
    let gw = Gateway::start_with(|c| {
        let mut fixture = upstream("fx", &python, &[&script]);
        fixture.env.insert(
            "FIXTURE_LOG".into(),
            serde_json::from_value(json!(log_path)).expect("secret"),
        );
        fixture.env.insert(
            "FIXTURE_TOKEN".into(),
            serde_json::from_value(json!("t0k3n")).expect("secret"),
        );
        c.upstreams = vec![upstream("broken", "/nonexistent/mcp-server", &[]), fixture];
    })
    .await;
    // Built-in tools work at once; the upstream's arrive when it has started.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "up"}}))
        .await;
    assert_eq!(status, 200);
    let names = listed_once(&gw, "fx__widget").await;
    for expected in [
        "fx__add",
        "fx__picture",
        "fx__fail",
        "fx__slow",
        "fx__environment",
        "fx__widget",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n.starts_with("broken__")),
        "{names:?}"
    );

    // Structured output and risk derived from the upstream's hints.
    let (status, _, done) = gw
        .invoke("fx__add", json!({"arguments": {"a": 2, "b": 3}}))
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["structured"], json!({"result": 5}), "{done}");
    let (_, _, described) = gw.get("/v1/tools/fx__add").await;
    assert_eq!(described["risk"], "low", "{described}");
    let (_, _, described) = gw.get("/v1/tools/fx__fail").await;
    assert_eq!(
        described["risk"], "high",
        "an upstream tool that does not say it only reads: {described}"
    );

    // Content kinds relayed whole.
    let (status, _, done) = gw.invoke("fx__picture", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["content"][0],
        json!({"type": "text", "text": "a pixel"})
    );
    assert_eq!(done["content"][1]["type"], "image", "{done}");
    assert_eq!(done["content"][1]["mime_type"], "image/png", "{done}");

    // The child's environment is what was configured, not the gateway's.
    let (_, _, done) = gw.invoke("fx__environment", json!({"arguments": {}})).await;
    let seen: Value = done["content"][0]["text"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| panic!("the environment as JSON text: {done}"));
    assert_eq!(seen["FIXTURE_TOKEN"], "t0k3n", "{done}");
    assert_eq!(seen["HOME"], Value::Null, "{done}");

    // An isError result is an upstream error (502) carrying the upstream's text.
    let (status, _, problem) = gw.invoke("fx__fail", json!({"arguments": {}})).await;
    assert_eq!(status, 502, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("failed on purpose")),
        "{problem}"
    );

    // The deadline cancels the call upstream (notifications/cancelled).
    let (status, _, problem) = gw
        .post(
            "/v1/tools/fx__slow/invoke",
            json!({"arguments": {"seconds": 30}, "timeout_ms": 400}),
        )
        .await;
    assert_eq!(status, 504, "{problem}");
    let mut heard = String::new();
    for _ in 0..100 {
        heard = std::fs::read_to_string(log.path()).unwrap_or_default();
        if heard.contains("cancelled slow") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        heard.contains("cancelled slow"),
        "the upstream heard the cancellation: {heard}"
    );

    // Over MCP: the upstream's vendor _meta reaches only the clients named for it.
    for (client_name, sees_meta) in [("openai-mcp", true), ("claude-ai", false)] {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
                .auth_header(gw.admin_key.clone()),
        );
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(client_name, "1"),
        )
        .serve(transport)
        .await
        .expect("connect");
        let tools = client.list_all_tools().await.expect("tools/list");
        let widget = tools
            .iter()
            .find(|t| t.name == "fx__widget")
            .expect("fx__widget");
        assert_eq!(
            widget.meta.is_some(),
            sees_meta,
            "{client_name}: {widget:?}"
        );
        client.cancel().await.expect("close");
    }

    // The upstream dies mid-call: that call is an upstream error, the gateway reconnects
    // (a new process) and its tools work again.
    let (status, _, problem) = gw.invoke("fx__crash", json!({"arguments": {}})).await;
    assert_eq!(status, 502, "{problem}");
    let mut back = false;
    for _ in 0..200 {
        let (status, _, problem) = gw
            .invoke("fx__add", json!({"arguments": {"a": 1, "b": 1}}))
            .await;
        if status == 200 {
            back = true;
            break;
        }
        // Meanwhile the tool stays listed and fails as an upstream error, not a 404.
        assert_eq!(status, 502, "{problem}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        back,
        "the upstream's tools came back after it was restarted"
    );
    let starts = std::fs::read_to_string(log.path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("pid "))
        .count();
    assert_eq!(starts, 2, "one restart");

    // Every call has its audit row, under the prefixed name (the attempts made while the
    // upstream was restarting are there too, as upstream errors).
    let (_, _, audit) = gw.get("/v1/audit?tool=fx__add&outcome=ok").await;
    assert_eq!(
        audit["entries"].as_array().map(Vec::len),
        Some(2),
        "{audit}"
    );

    // On shutdown the child process is ended, not left behind.
    let pid: u32 = std::fs::read_to_string(log.path())
        .expect("log")
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("pid ")?.trim().parse().ok())
        .expect("the fixture logged its pid");
    gw.stop().await;
    let mut gone = false;
    for _ in 0..100 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie already reaped by the time we look.
        if state.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the upstream's process {pid} outlived the gateway");
}

/// The reference server `@modelcontextprotocol/server-everything` (npm, pinned in
/// `tests/clients`) over stdio: its tools, hyphenated names and all, over REST and MCP.
#[tokio::test]
async fn server_everything_over_stdio() {
    let script = everything_script().display().to_string();
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![upstream("everything", "node", &[&script, "stdio"])];
    })
    .await;
    assert_everything_sums(&gw, 1, 2).await;
    // Resource links come back as links.
    let (status, _, done) = gw
        .invoke(
            "everything__get-resource-links",
            json!({"arguments": {"count": 2}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["content"][1]["type"], "resource_link", "{done}");
    assert!(
        done["content"][1]["link"]["uri"]
            .as_str()
            .is_some_and(|u| u.starts_with("demo://")),
        "{done}"
    );
    // Arguments the upstream's schema refuses are refused by the gateway first.
    let (status, _, problem) = gw
        .invoke("everything__get-sum", json!({"arguments": {"a": "one"}}))
        .await;
    assert_eq!(status, 400, "{problem}");

    // Over MCP the same tool, the same answer.
    assert_eq!(
        everything_echo_over_mcp(&gw, "through two hops").await,
        "Echo: through two hops"
    );
    gw.stop().await;
}

/// Upstreams that misbehave on stdout — garbage instead of JSON-RPC, or an endless flood
/// — hold up nothing: the gateway starts, serves its own tools and stays responsive,
/// and registers nothing from them.
#[tokio::test]
async fn upstreams_writing_garbage_or_flooding_stdout_hold_nothing_up() {
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![
            upstream(
                "garbage",
                "/bin/sh",
                &[
                    "-c",
                    "echo 'this is not json-rpc'; echo '{\"jsonrpc\": 7}'; sleep 600",
                ],
            ),
            upstream("flood", "/usr/bin/yes", &["not json-rpc either"]),
        ];
    })
    .await;
    let started = std::time::Instant::now();
    for _ in 0..20 {
        let (status, _, body) = gw
            .invoke("echo", json!({"arguments": {"message": "still here"}}))
            .await;
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 20 calls and 2 s of pauses: a gateway busy parsing the flood would take far longer.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "calls slowed to a crawl: {:?}",
        started.elapsed()
    );
    let names = listed(&gw).await;
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("garbage__") || n.starts_with("flood__")),
        "{names:?}"
    );
    let (status, _, _) = gw.get("/healthz").await;
    assert_eq!(status, 200);
    gw.stop().await;
}

/// An upstream flooding its stderr, with one line that never ends or with many short
/// ones, costs the gateway neither memory nor its cores: the gateway reads at most
/// 1 MiB of it a second (the child then waits on its pipe), logs at most 100 lines a
/// second, and holds at most 4 KiB of a line (the unit tests of `upstream::connect`).
/// What it holds is bounded by what it read, so the markers are the measure: this
/// process's resident memory is not, as the tests running beside this one move it too. Before, it held an unending line whole (a
/// 384 MiB line: +440 MiB) and logged a flood of short lines as fast as the child wrote
/// them (both cores busy, 3 GB of log in 40 s).
#[tokio::test]
async fn an_upstream_flooding_its_stderr_costs_no_memory_and_is_read_at_a_bounded_rate() {
    // Each child marks when it has written this much, then floods on without end.
    const MARK: u64 = 8 << 20;
    let markers = tempfile::tempdir().expect("marker dir");
    let (one_line, many_lines) = (
        markers.path().join("one-line"),
        markers.path().join("many-lines"),
    );
    let gw = Gateway::start_with(|c| {
        let flood = |name: &str, source: &str, marker: &std::path::Path| {
            let script = format!(
                "{{ {source} | head -c {MARK}; touch '{}'; {source}; }} >&2",
                marker.display()
            );
            upstream(name, "/bin/sh", &["-c", &script])
        };
        c.upstreams = vec![
            flood("endless", "tr '\\0' x < /dev/zero", &one_line),
            flood("chatty", "yes 'debug: one more line'", &many_lines),
        ];
    })
    .await;
    // Unthrottled, even this debug build reads 8 MiB of either within a second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for marker in [&one_line, &many_lines] {
        assert!(
            !marker.exists(),
            "{} MiB of stderr were read within 3 s: {}",
            MARK >> 20,
            marker.display()
        );
    }
    still_serves(gw).await;
}

/// An upstream whose tool list changes (`notifications/tools/list_changed`) is listed
/// again: the new tool appears and can be called.
#[tokio::test]
async fn an_upstream_whose_tools_change_is_listed_again() {
    let gw =
        Gateway::start_with(|c| c.upstreams = vec![python_upstream("fx", "fixture_server.py")])
            .await;
    let names = listed_once(&gw, "fx__grow").await;
    assert!(!names.contains(&"fx__grown".to_owned()), "{names:?}");
    let (status, _, done) = gw.invoke("fx__grow", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    let names = listed_once(&gw, "fx__grown").await;
    assert!(names.contains(&"fx__grown".to_owned()), "{names:?}");
    let (status, _, done) = gw.invoke("fx__grown", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    gw.stop().await;
}

/// An upstream that announces a change after every listing is listed again at most once
/// a second, not as fast as it answers: before, the gateway re-listed it ~3,000 times a
/// second on one busy core.
#[tokio::test]
async fn an_upstream_announcing_changes_without_end_is_listed_at_most_once_a_second() {
    let (gw, counted) = counting("relisting", "relisting_server.py", "RELIST_COUNT").await;
    let listings = || counted.count();
    let names = listed_once(&gw, "relisting__ping").await;
    assert!(names.iter().any(|n| n == "relisting__ping"), "never listed");
    let first = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (n, seconds) = (listings(), first.elapsed().as_secs_f64());
    // One at the start, then one a second at the most.
    assert!(
        n as f64 <= seconds + 2.0,
        "listed {n} times in {seconds:.1} s"
    );
    assert!(n >= 2, "the announced change was never listed: {n}");
    let (status, _, done) = gw.invoke("relisting__ping", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    gw.stop().await;
}

/// An upstream whose tool definitions change at every listing (each change pinned and
/// audited, in every tenant's chain for an operator's upstream) is listed less and less
/// often: after 1 s, then 2, 4, … Before, it was listed once a second for ever.
#[tokio::test]
async fn an_upstream_whose_definitions_keep_changing_is_listed_less_and_less_often() {
    let (gw, counted) = counting_with(
        "drifting",
        "relisting_server.py",
        &[("RELIST_COUNT", None), ("RELIST_DRIFT", Some("1"))],
    )
    .await;
    listed_once(&gw, "drifting__ping").await;
    let n = listed_less_and_less_often(&counted).await;
    // Each change is in the audit (the first listing pins, quietly).
    let (_, _, audit) = gw.get("/v1/audit?adapter=definition").await;
    let changes = audit["entries"].as_array().expect("entries").len() as u64;
    assert!((2..=n).contains(&changes), "{n} listings: {audit}");
    gw.stop().await;
}

/// An upstream whose every listing fails (10,001 tools, one more than is read) while it
/// announces a change after each is listed less and less often, as one whose definitions
/// keep changing. Before, it was read to the bound once a second for ever.
#[tokio::test]
async fn an_upstream_whose_listings_keep_failing_is_listed_less_and_less_often() {
    let (gw, counted) = counting_with(
        "overfull",
        "relisting_server.py",
        &[("RELIST_COUNT", None), ("RELIST_FRESH", Some("10000"))],
    )
    .await;
    let mut waited = 0;
    while counted.count() == 0 {
        waited += 1;
        assert!(waited < 300, "never listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    listed_less_and_less_often(&counted).await;
    still_serves(gw).await;
}

/// An upstream naming 9,999 new tools (and `ping`) at every listing fills at most 20,000
/// pins (two full listings); a new tool past that is neither pinned nor, quarantining,
/// offered, while the tools pinned before still are. Before, each listing added 9,999
/// rows to the store, for as long as the upstream was configured.
#[tokio::test]
async fn an_upstream_naming_new_tools_at_every_listing_fills_a_bounded_number_of_pins() {
    let script = sdk_clients()
        .join("relisting_server.py")
        .display()
        .to_string();
    let counted = Counted(tempfile::NamedTempFile::new().expect("count file"));
    let count_path = counted.0.path().display().to_string();
    let gw = Gateway::start_with(|c| {
        let mut entry = upstream("fresh", "python3", &[&script]);
        for (var, value) in [
            ("RELIST_COUNT", count_path.as_str()),
            ("RELIST_FRESH", "9999"),
        ] {
            entry.env.insert(
                var.into(),
                serde_json::from_value(json!(value)).expect("secret"),
            );
        }
        entry.pin = toolgate_core::policy::PinMode::Quarantine;
        c.upstreams = vec![entry];
    })
    .await;
    let offered = |name: &'static str| {
        let gw = &gw;
        async move { gw.get(&format!("/v1/tools/fresh__{name}")).await.0 == 200 }
    };
    // The first listing's tools, then the second's in their place, then the third's in
    // place of those: the second's go, and none of the third's may come.
    for (tool, wanted) in [("t1_0", true), ("t2_0", true), ("t2_0", false)] {
        let mut waited = 0;
        while offered(tool).await != wanted {
            waited += 1;
            assert!(
                waited < 900,
                "{tool} offered: {} after 90 s ({} listings)",
                !wanted,
                counted.count()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // 10,000 pins at the first listing, 9,999 at the second, one at the third.
    assert!(offered("t3_0").await, "the last pin's room was not taken");
    assert!(
        !offered("t3_1").await,
        "a new tool past the bound is offered ({} listings)",
        counted.count()
    );
    assert!(offered("ping").await, "the tool pinned at first went away");
    let (status, _, done) = gw.invoke("fresh__ping", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    // Every pin, a page at a time.
    let (mut pins, mut cursor) = (0, None::<String>);
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/tool-definitions?owner=operator&limit=500&cursor={c}"),
            None => "/v1/tool-definitions?owner=operator&limit=500".to_owned(),
        };
        let (status, _, page) = gw.get(&path).await;
        assert_eq!(status, 200, "{page}");
        pins += page["definitions"].as_array().expect("definitions").len();
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pins, 20_000, "pins kept ({} listings)", counted.count());
    gw.stop().await;
}

/// An upstream writing notifications without pause is read at a bounded rate: past its
/// budget a second (2,000) the gateway stops reading it until the next second, and the
/// upstream's writes wait on the full pipe. Before, the gateway read them as fast as the
/// child wrote, on 1.4 of its 2 cores.
#[tokio::test]
async fn an_upstream_flooding_notifications_is_read_at_a_bounded_rate() {
    let (gw, counted) = counting("chatter", "chatter_server.py", "CHATTER_FLOOD").await;
    let written = || counted.count();
    listed_once(&gw, "chatter__chatter").await;
    let (before, first) = (written(), std::time::Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (read, seconds) = (written() - before, first.elapsed().as_secs_f64());
    // A second's budget more than the time taken (the second under way when counting
    // began), and what the pipe and the readers' buffers hold.
    let bound = 2000.0 * (seconds + 1.0) + 2000.0;
    assert!(
        read as f64 <= bound,
        "{read} notifications written in {seconds:.1} s (at most {bound})"
    );
    assert!(read > 0, "the flood never started");
    gw.stop().await;
}

/// An upstream whose `tools/list` always names a next page is read to a bound (10,000
/// tools, 100 pages, 16 MiB) and its listing then fails; before, the gateway followed the
/// pages for ever and kept every one.
#[tokio::test]
async fn an_upstream_listing_without_end_is_read_to_a_bound_then_refused() {
    let (gw, counted) = counting("endless", "chatter_server.py", "CHATTER_ENDLESS_LIST").await;
    let pages = || counted.count();
    // Page 11 takes the list past 10,000 tools; no page is asked for after it.
    for _ in 0..100 {
        if pages() >= 11 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pages(), 11, "pages asked for");
    let names = listed(&gw).await;
    assert!(
        !names.iter().any(|n| n.starts_with("endless__")),
        "a refused listing registered tools"
    );
    still_serves(gw).await;
}

/// While an upstream is away, its tools stay listed but marked unavailable (REST
/// `available: false`, a note in the MCP description), and calls fail as `upstream`
/// errors; they come back when it does. A connected MCP session hears of both changes
/// (`notifications/tools/list_changed`).
#[tokio::test]
async fn an_upstream_that_is_away_has_its_tools_marked_unavailable() {
    let dir = sdk_clients();
    let python = dir.join(".venv/bin/python").display().to_string();
    let script = dir.join("fixture_server.py").display().to_string();
    // It dies once, 1.5 s after its first start, and stays up once restarted.
    let once = tempfile::tempdir().expect("tempdir");
    let marker = once.path().join("exited").display().to_string();
    let gw = Gateway::start_with(|c| {
        let mut blink = upstream("blink", &python, &[&script]);
        for (name, value) in [
            ("FIXTURE_EXIT_AFTER", "1.5"),
            ("FIXTURE_EXIT_ONCE", &marker),
        ] {
            blink.env.insert(
                name.into(),
                serde_json::from_value(json!(value)).expect("secret"),
            );
        }
        c.upstreams = vec![blink];
    })
    .await;
    // Listed as available (a session then starts watching), away, then back.
    enum Phase {
        Up,
        Away,
        Back,
    }
    let mut phase = Phase::Up;
    let mut watcher = None;
    for _ in 0..2000 {
        let (status, _, tool) = gw.get("/v1/tools/blink__add").await;
        if status == 200 {
            let available = tool["available"]
                .as_bool()
                .unwrap_or_else(|| panic!("no `available` field: {tool}"));
            match (&phase, available) {
                (Phase::Up, true) if watcher.is_none() => {
                    watcher = Some(crate::tenant_upstreams::watch(&gw, &gw.admin_key).await);
                }
                (Phase::Up, false) if watcher.is_some() => phase = Phase::Away,
                (Phase::Away, true) => {
                    phase = Phase::Back;
                    break;
                }
                _ => {}
            }
            if matches!(phase, Phase::Away) {
                let (status, _, problem) = gw
                    .invoke("blink__add", json!({"arguments": {"a": 1, "b": 2}}))
                    .await;
                // Reconnection may win the race; otherwise a clean upstream error.
                assert!(matches!(status, 200 | 502), "{status}: {problem}");
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        matches!(phase, Phase::Back),
        "listed as available, then as unavailable, then as available again"
    );
    let (session, mut heard) = watcher.expect("watching");
    let mut told = 0;
    while told < 2 {
        match tokio::time::timeout(Duration::from_secs(10), heard.recv()).await {
            Ok(Some(())) => told += 1,
            _ => break,
        }
    }
    assert_eq!(
        told, 2,
        "tools/list_changed when the upstream went away and came back"
    );
    session.cancel().await.expect("close");
    gw.stop().await;
}

/// The reference `@modelcontextprotocol/server-filesystem` (npm, pinned) over stdio,
/// confined to one directory: its tools list, read and write there, and its own refusal
/// of a path outside comes back as a clean upstream tool error.
#[tokio::test]
async fn server_filesystem_over_stdio() {
    let dir = sdk_clients();
    let script = dir
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
        .display()
        .to_string();
    let shared = tempfile::tempdir().expect("shared dir");
    let root = shared.path().canonicalize().expect("canonical");
    std::fs::write(root.join("hello.txt"), "hello from the shared dir\n").expect("write");
    let root_arg = root.display().to_string();
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![upstream("files", "node", &[&script, &root_arg])];
    })
    .await;
    let names = listed_once(&gw, "files__read_text_file").await;
    assert!(
        names.iter().any(|n| n == "files__list_directory"),
        "{names:?}"
    );

    let path = root.join("hello.txt").display().to_string();
    let (status, _, done) = gw
        .invoke(
            "files__read_text_file",
            json!({"arguments": {"path": path}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("hello from the shared dir")),
        "{done}"
    );
    let written = root.join("made.txt").display().to_string();
    let (status, _, done) = gw
        .invoke(
            "files__write_file",
            json!({"arguments": {"path": written, "content": "made upstream"}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        std::fs::read_to_string(root.join("made.txt")).expect("made"),
        "made upstream"
    );
    let (status, _, problem) = gw
        .invoke(
            "files__read_text_file",
            json!({"arguments": {"path": "/etc/passwd"}}),
        )
        .await;
    assert_eq!(status, 502, "{problem}");
    assert_eq!(problem["type"], "urn:toolgate:error:upstream", "{problem}");
    gw.stop().await;
}

/// A count a fixture keeps in a file of its own (`tests/clients/*.py`, standard library
/// only): listings made, notifications written, pages asked for.
struct Counted(tempfile::NamedTempFile);

impl Counted {
    fn count(&self) -> u64 {
        std::fs::read_to_string(self.0.path())
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// The gateway still answers a built-in tool's call, whatever its upstream did; then it
/// stops.
async fn still_serves(gw: Gateway) {
    let (status, _, done) = gw
        .invoke("echo", json!({"arguments": {"message": "still here"}}))
        .await;
    assert_eq!(status, 200, "{done}");
    gw.stop().await;
}

/// How many times the upstream was listed in the 8 s from now: listed at 0 s, then 1, 3
/// and 7 s after (the pause doubling), at most 5 with a listing under way, where at one a
/// second it would be 8 or 9.
async fn listed_less_and_less_often(counted: &Counted) -> u64 {
    let first = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (n, seconds) = (counted.count(), first.elapsed().as_secs_f64());
    assert!((3..=5).contains(&n), "listed {n} times in {seconds:.1} s");
    n
}

/// A gateway with one stdio upstream `name`, the test clients' `script` run by the
/// system's python3, told by `var` where to keep its count.
async fn counting(name: &str, script: &str, var: &str) -> (Gateway, Counted) {
    counting_with(name, script, &[(var, None)]).await
}

/// [`counting`] with more variables: each set to its value, or (`None`) to the count
/// file's path.
async fn counting_with(
    name: &str,
    script: &str,
    vars: &[(&str, Option<&str>)],
) -> (Gateway, Counted) {
    let script = sdk_clients().join(script).display().to_string();
    let counted = Counted(tempfile::NamedTempFile::new().expect("count file"));
    let count_path = counted.0.path().display().to_string();
    let gw = Gateway::start_with(|c| {
        let mut entry = upstream(name, "python3", &[&script]);
        for (var, value) in vars {
            entry.env.insert(
                (*var).into(),
                serde_json::from_value(json!(value.unwrap_or(&count_path))).expect("secret"),
            );
        }
        c.upstreams = vec![entry];
    })
    .await;
    (gw, counted)
}
