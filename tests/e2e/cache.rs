//! Tool-result caching (issue 31), on SQLite and on Postgres: a cached `read_file`
//! answers the same call again without reading the disk, both calls are audited (the
//! second `cache: hit`) and the chain still verifies; `Cache-Control` and MCP `_meta`
//! bypass it; another tenant never gets the first tenant's result; a cache hit still
//! passes authorization and the tenant's policy.

use std::time::SystemTime;

use serde_json::{Value, json};
use toolgate_e2e::{Gateway, PgDb, client_with_key, read};

/// The text `read_file` answered, from an invoke response.
fn text(body: &Value) -> &str {
    body["content"][0]["text"].as_str().unwrap_or_default()
}

/// Rewrites `path` with `contents` of the same length and puts its modification time
/// back: a cache that checked the file's metadata would not notice, only a read would.
fn rewrite_keeping_mtime(path: &std::path::Path, contents: &str) {
    let modified: SystemTime = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("mtime");
    std::fs::write(path, contents).expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(modified))
        .expect("set mtime");
}

async fn cached_reads(gw: Gateway) {
    // Tenant A (the default tenant) caches read_file by its policy; tenant B gets the
    // operator's default for every tenant.
    let put = gw
        .http
        .put(gw.url("/v1/policy"))
        .json(&json!({"cache": {"read_file": 60}}))
        .send()
        .await
        .expect("put policy");
    let (status, _, policy) = read(put).await;
    assert_eq!(status, 200, "{policy}");
    assert_eq!(policy["cache"], json!({"read_file": 60}), "{policy}");

    let file = gw.workspace().join("notes.txt");
    std::fs::write(&file, "first version").expect("write");
    let args = json!({"arguments": {"path": "notes.txt"}});
    let first = gw
        .http
        .post(gw.url("/v1/tools/read_file/invoke"))
        .json(&args)
        .send()
        .await
        .expect("first call");
    assert_eq!(
        first.headers().get("cache-status").map(|v| v.as_bytes()),
        Some(&b"toolgate; fwd=miss; stored"[..])
    );
    let (status, _, first) = read(first).await;
    assert_eq!(status, 200, "{first}");
    assert!(text(&first).contains("first version"), "{first}");

    // The mtime trap: the file changes, its metadata does not. The same call (keys in
    // another order: the arguments are compared canonically) is answered from the cache.
    rewrite_keeping_mtime(&file, "SECOND version");
    let second = gw
        .http
        .post(gw.url("/v1/tools/read_file/invoke"))
        .body(r#"{"arguments": {"path": "notes.txt"}}"#)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("second call");
    assert_eq!(
        second.headers().get("cache-status").map(|v| v.as_bytes()),
        Some(&b"toolgate; hit"[..])
    );
    let (status, _, second) = read(second).await;
    assert_eq!(status, 200, "{second}");
    assert!(
        text(&second).contains("first version"),
        "answered from the cache, not the disk: {second}"
    );

    // Tenant B, the same call on its own workspace: its own file, never A's result.
    let b_key = gw.create_tenant("globex").await;
    let b = client_with_key(&b_key);
    let b_dir = gw.data.path().join("workspace").join("globex");
    std::fs::create_dir_all(&b_dir).expect("b workspace");
    std::fs::write(b_dir.join("notes.txt"), "globex's own notes").expect("write b");
    for expected in ["toolgate; fwd=miss; stored", "toolgate; hit"] {
        let answer = b
            .post(gw.url("/v1/tools/read_file/invoke"))
            .json(&args)
            .send()
            .await
            .expect("b call");
        assert_eq!(
            answer.headers().get("cache-status").map(|v| v.as_bytes()),
            Some(expected.as_bytes())
        );
        let (status, _, body) = read(answer).await;
        assert_eq!(status, 200, "{body}");
        assert!(text(&body).contains("globex's own notes"), "{body}");
    }

    // Cache-Control: no-cache reads the disk (and keeps the fresh result).
    let fresh = gw
        .http
        .post(gw.url("/v1/tools/read_file/invoke"))
        .header("cache-control", "no-cache")
        .json(&args)
        .send()
        .await
        .expect("fresh call");
    assert_eq!(
        fresh.headers().get("cache-status").map(|v| v.as_bytes()),
        Some(&b"toolgate; fwd=request"[..])
    );
    let (_, _, fresh) = read(fresh).await;
    assert!(text(&fresh).contains("SECOND version"), "{fresh}");
    let (_, _, again) = gw.invoke("read_file", args.clone()).await;
    assert!(
        text(&again).contains("SECOND version"),
        "no-cache kept the fresh result: {again}"
    );

    // MCP: `_meta` `toolgate/cache: no-store` reads the disk and keeps nothing.
    rewrite_keeping_mtime(&file, "THIRD  version");
    let messages = crate::mcp::post_stateless(
        &gw,
        "cache-e2e",
        7,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "notes.txt"},
               "_meta": {"toolgate/cache": "no-store"}}),
    )
    .await;
    let result = &messages.last().expect("response")["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("THIRD  version"),
        "{result}"
    );
    assert_eq!(result["_meta"]["toolgate/cache"], "bypass", "{result}");
    let messages = crate::mcp::post_stateless(
        &gw,
        "cache-e2e",
        8,
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "notes.txt"}}),
    )
    .await;
    let result = &messages.last().expect("response")["result"];
    assert_eq!(result["_meta"]["toolgate/cache"], "hit", "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("SECOND version"),
        "no-store left the cached result alone: {result}"
    );

    // A hit still passes the tenant's policy: denied now, though cached.
    let put = gw
        .http
        .put(gw.url("/v1/policy"))
        .json(&json!({"cache": {"read_file": 60},
                      "rules": [{"tool": "read_file", "action": "deny"}]}))
        .send()
        .await
        .expect("put policy");
    assert_eq!(put.status(), 200);
    let (status, _, denied) = gw.invoke("read_file", args.clone()).await;
    assert_eq!(status, 403, "{denied}");
    assert_eq!(denied["type"], "urn:toolgate:error:denied", "{denied}");

    // Every call has its row, saying what the cache did; the chain verifies.
    let (status, _, page) = gw.get("/v1/audit?tool=read_file&limit=100").await;
    assert_eq!(status, 200, "{page}");
    let caches: Vec<Value> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .rev()
        .map(|e| e["cache"].clone())
        .collect();
    assert_eq!(
        caches,
        [
            json!("miss"),
            json!("hit"),
            json!("bypass"),
            json!("hit"),
            json!("bypass"),
            json!("hit"),
            Value::Null,
        ],
        "{page}"
    );
    let (status, _, verified) = gw.post("/v1/audit/verify", json!({})).await;
    assert_eq!(status, 200, "{verified}");
    assert_eq!(verified["verified"], true, "{verified}");

    // Metrics count hits and misses.
    let metrics = gw.metrics().await;
    let count = |result: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("toolgate_tool_cache_total{")
                    && l.contains(&format!("toolgate_cache_result=\"{result}\""))
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
            .sum()
    };
    assert_eq!(count("hit"), 4.0, "{metrics}");
    assert_eq!(count("miss"), 2.0, "{metrics}");
    assert_eq!(count("bypass"), 2.0, "{metrics}");
    gw.stop().await;
}

#[tokio::test]
async fn a_cached_read_is_answered_without_the_disk_audited_and_per_tenant_on_sqlite() {
    let gw = Gateway::start_with(|c| {
        c.cache.tools.insert("read_file".into(), 30);
    })
    .await;
    cached_reads(gw).await;
}

#[tokio::test]
async fn a_cached_read_is_answered_without_the_disk_audited_and_per_tenant_on_postgres() {
    let db = PgDb::create().await;
    let url = db.url.clone();
    let gw = Gateway::start_with(|c| {
        c.database.url = Some(toolgate_server::config::Secret::new(url));
        c.cache.tools.insert("read_file".into(), 30);
    })
    .await;
    cached_reads(gw).await;
    db.drop_db().await;
}
