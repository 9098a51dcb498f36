//! The audit log over REST beyond its listing, on SQLite and on Postgres: the live calls
//! stream (`GET /v1/audit/events`), search by call and trace id, and `POST
//! /v1/audit/verify` catching a truncated chain.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::Connection;
use toolgate_e2e::{Gateway, PgDb, client_with_key, read};

/// Reads `call` events from an SSE response until `n` arrived (or 10 s passed).
async fn calls(response: reqwest::Response, n: usize) -> Vec<(i64, Value)> {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.len() < n && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
        got = text
            .split("\n\n")
            .filter(|e| e.contains("event: call"))
            .filter_map(|e| {
                let id = e.lines().find_map(|l| l.strip_prefix("id: "))?;
                let data = e.lines().find_map(|l| l.strip_prefix("data: "))?;
                Some((id.parse().ok()?, serde_json::from_str(data).ok()?))
            })
            .collect();
    }
    got
}

async fn stream_search_and_verify(gw: Gateway, tamper: impl AsyncFnOnce()) {
    let b = client_with_key(&gw.create_tenant("globex").await);
    let a_stream = gw
        .http
        .get(gw.url("/v1/audit/events"))
        .send()
        .await
        .expect("stream");
    let b_stream = b
        .get(gw.url("/v1/audit/events"))
        .send()
        .await
        .expect("stream");

    let trace = "7bf92f3577b34da6a3ce929d0e0e4739";
    let mut call_ids = Vec::new();
    for i in 0..3 {
        let mut request = gw
            .http
            .post(gw.url("/v1/tools/echo/invoke"))
            .json(&json!({"arguments": {"message": format!("m{i}")}}));
        if i == 1 {
            request = request.header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"));
        }
        let (status, _, body) = read(request.send().await.expect("invoke")).await;
        assert_eq!(status, 200, "{body}");
        call_ids.push(body["call_id"].as_str().expect("call id").to_owned());
    }
    let (status, _, _) = read(
        b.post(gw.url("/v1/tools/echo/invoke"))
            .json(&json!({"arguments": {"message": "b's"}}))
            .send()
            .await
            .expect("invoke"),
    )
    .await;
    assert_eq!(status, 200);

    // Each tenant's stream tells of its own calls, in order, and of nothing else.
    let a_calls = calls(a_stream, 3).await;
    let seen: Vec<&str> = a_calls
        .iter()
        .map(|(_, e)| e["call_id"].as_str().expect("call id"))
        .collect();
    assert_eq!(seen, call_ids, "{a_calls:?}");
    assert!(a_calls.windows(2).all(|w| w[0].0 < w[1].0), "ids are seqs");
    assert_eq!(a_calls[0].1["tool"], "echo");
    assert_eq!(a_calls[0].1["arguments"]["message"], "m0");
    let b_calls = calls(b_stream, 2).await;
    assert_eq!(b_calls.len(), 1, "only B's own call: {b_calls:?}");
    assert_eq!(b_calls[0].1["arguments"]["message"], "b's");

    // Reconnecting with Last-Event-ID gets what came after it.
    let resumed = gw
        .http
        .get(gw.url("/v1/audit/events"))
        .header("last-event-id", a_calls[0].0.to_string())
        .send()
        .await
        .expect("stream");
    let resumed = calls(resumed, 2).await;
    let again: Vec<&str> = resumed
        .iter()
        .map(|(_, e)| e["call_id"].as_str().expect("call id"))
        .collect();
    assert_eq!(again, &call_ids[1..]);
    let (status, _, body) = read(
        gw.http
            .get(gw.url("/v1/audit/events"))
            .header("last-event-id", "yesterday")
            .send()
            .await
            .expect("stream"),
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // Search by trace id (any case) and by call id; a malformed trace id is the client's.
    let (status, _, page) = gw
        .get(&format!("/v1/audit?trace_id={}", trace.to_uppercase()))
        .await;
    assert_eq!(status, 200, "{page}");
    let found = page["entries"].as_array().expect("entries");
    assert_eq!(found.len(), 1, "{page}");
    assert_eq!(found[0]["call_id"], call_ids[1].as_str());
    let (_, _, page) = gw.get(&format!("/v1/audit?call_id={}", call_ids[2])).await;
    assert_eq!(
        page["entries"][0]["call_id"],
        call_ids[2].as_str(),
        "{page}"
    );
    assert_eq!(page["entries"].as_array().map(Vec::len), Some(1));
    let (_, _, page) = read(
        b.get(gw.url(&format!("/v1/audit?call_id={}", call_ids[2])))
            .send()
            .await
            .expect("search"),
    )
    .await;
    assert_eq!(page["entries"], json!([]), "not another tenant's row");
    let (status, _, body) = gw.get("/v1/audit?trace_id=not-a-trace").await;
    assert_eq!(status, 400, "{body}");

    // Verification: intact, then the newest row removed behind the gateway's back.
    let (status, _, verified) = gw.post("/v1/audit/verify", json!({})).await;
    assert_eq!(status, 200, "{verified}");
    assert_eq!(verified["verified"], true, "{verified}");
    assert_eq!(verified["rows"], 3);
    assert_eq!(verified["problem"], Value::Null);
    tamper().await;
    let (_, _, verified) = gw.post("/v1/audit/verify", json!({})).await;
    assert_eq!(verified["verified"], false, "{verified}");
    assert_eq!(verified["problem"]["kind"], "truncated", "{verified}");
    assert_eq!(verified["problem"]["seq"], 3);
    assert!(
        verified["problem"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("newest rows were removed")),
        "{verified}"
    );
    let (status, _, verified) = read(
        b.post(gw.url("/v1/audit/verify"))
            .send()
            .await
            .expect("verify"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        verified["verified"], true,
        "B's chain is untouched: {verified}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn audit_stream_search_and_verify_on_sqlite() {
    let gw = Gateway::start().await;
    let db = format!("sqlite://{}", gw.data.path().join("toolgate.db").display());
    stream_search_and_verify(gw, async move || {
        let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&db)
            .await
            .expect("open the database");
        for sql in [
            "drop trigger audit_log_no_delete",
            "delete from audit_log where seq = 3 and tenant_id = (select tenant_id from tenant where name = 'default')",
        ] {
            sqlx::query(sql).execute(&mut conn).await.expect(sql);
        }
    })
    .await;
}

#[tokio::test]
async fn audit_stream_search_and_verify_on_postgres() {
    let db = PgDb::create().await;
    let url = db.url.clone();
    let gw = Gateway::start_with(|c| {
        c.database.url = Some(toolgate_server::config::Secret::new(url.clone()));
    })
    .await;
    let admin = db.url.clone();
    stream_search_and_verify(gw, async move || {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
            .await
            .expect("connect");
        for sql in [
            "alter table audit_log disable trigger audit_log_append_only",
            "delete from audit_log where seq = 3 and tenant_id = (select tenant_id from tenant where name = 'default')",
        ] {
            sqlx::query(sql).execute(&mut conn).await.expect(sql);
        }
    })
    .await;
    db.drop_db().await;
}

/// A page of the audit log holds at most about 4 MiB of rows' text, whatever its `limit`:
/// rows keep a call's arguments (up to the body's bound, 1 MiB, even for a call its
/// schema refused), and `GET /v1/audit?limit=1000` read them whole (400 such rows took
/// the gateway from 140 MB to 1.2 GB; 1,000 would take 3 GB, per request). The page ends
/// early with a cursor, the cursor reaches every row, the live stream delivers them all,
/// the summary counts them, and the chain verifies.
#[tokio::test]
async fn a_page_of_large_audit_rows_is_bounded_in_bytes_not_only_in_rows() {
    // Rows keep the arguments whole (by default they are cut at 64 KiB).
    let gw = Gateway::start_with(|c| c.audit.max_argument_bytes = 0).await;
    let message = "x".repeat(900_000);
    let made = 7;
    for _ in 0..made {
        let (status, _, body) = gw
            .invoke("echo", json!({"arguments": {"message": message}}))
            .await;
        assert_eq!(status, 400, "refused by echo's schema, and audited: {body}");
    }
    let (status, _, first) = gw.get("/v1/audit?limit=1000&tool=echo").await;
    assert_eq!(status, 200);
    let entries = first["entries"].as_array().expect("entries").len();
    assert!(
        (1..=5).contains(&entries),
        "a page held {entries} rows of 900 kB"
    );
    let mut cursor = first["next_cursor"].as_str().map(str::to_owned);
    assert!(cursor.is_some(), "the page says there is more");
    let mut seen = entries;
    while let Some(at) = cursor {
        let (status, _, page) = gw
            .get(&format!("/v1/audit?limit=1000&tool=echo&cursor={at}"))
            .await;
        assert_eq!(status, 200);
        let rows = page["entries"].as_array().expect("entries");
        assert!(rows.iter().all(|r| r["arguments"]["message"] == message));
        seen += rows.len();
        cursor = page["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, made);

    let (_, _, newest) = gw.get("/v1/audit?limit=1").await;
    let rows = newest["entries"][0]["seq"].as_u64().expect("seq") as usize;
    let stream = gw
        .http
        .get(gw.url("/v1/audit/events"))
        .header("last-event-id", "0")
        .send()
        .await
        .expect("stream");
    let streamed = calls(stream, rows).await;
    let big = streamed
        .iter()
        .filter(|(_, row)| row["arguments"]["message"] == message)
        .count();
    assert_eq!(big, made, "the stream goes on past a cut page");

    let (_, _, summary) = gw.get("/v1/audit/summary?minutes=10").await;
    let errors: u64 = summary["minutes"]
        .as_array()
        .expect("minutes")
        .iter()
        .filter_map(|m| m["errors"].as_u64())
        .sum();
    assert_eq!(errors, made as u64, "{summary}");
    let (_, _, verified) = gw.post("/v1/audit/verify", json!({})).await;
    assert_eq!(verified["verified"], true, "{verified}");
}

/// A call's megabyte of arguments is not a megabyte of audit: past
/// `audit.max_argument_bytes` (64 KiB by default) a row keeps each long string's first
/// 1,024 bytes and its length, and the arguments' digest still tells whole values apart.
/// The tool itself gets everything. (Before, every row kept its arguments whole, refused
/// calls' included: 400 refused calls of 900 kB made 400 MB of log.)
#[tokio::test]
async fn a_row_keeps_a_cut_of_large_arguments_and_their_digest_names_the_whole() {
    let gw = Gateway::start().await;
    let same_start = "p".repeat(2_000);
    let a = format!("{same_start}{}", "A".repeat(90_000));
    let b = format!("{same_start}{}", "B".repeat(90_000));
    for message in [&a, &b, &a] {
        let (status, _, body) = gw
            .invoke("echo", json!({"arguments": {"message": message}}))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let refused = "r".repeat(900_000);
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": refused}}))
        .await;
    assert_eq!(status, 400);
    let content = "c".repeat(300_000);
    let (status, _, body) = gw
        .invoke(
            "write_file",
            json!({"arguments": {"path": "big.txt", "content": content}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let written = std::fs::read_to_string(gw.workspace().join("big.txt")).expect("file");
    assert_eq!(written, content, "the tool got every byte");

    let (_, _, page) = gw.get("/v1/audit?limit=10").await;
    let rows: Vec<&Value> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .collect();
    let echo: Vec<&&Value> = rows.iter().filter(|r| r["tool"] == "echo").collect();
    assert_eq!(echo.len(), 4, "{page}");
    let cut = |text: &str| format!("{}…[cut: {} bytes]", &text[..1024], text.len());
    // Newest first: the refused call, then a, b, a.
    assert_eq!(echo[0]["outcome"], "invalid_arguments");
    assert_eq!(echo[0]["arguments"]["message"], cut(&refused));
    for row in &echo[1..] {
        assert_eq!(row["arguments"]["message"], cut(&a), "a and b begin alike");
        assert!(
            row.to_string().len() < 8_192,
            "a row of {} bytes",
            row.to_string().len()
        );
    }
    let digest = |row: &Value| row["arguments_hash"].as_str().expect("digest").to_owned();
    assert_eq!(digest(echo[1]), digest(echo[3]), "a twice: one digest");
    assert_ne!(digest(echo[1]), digest(echo[2]), "a and b: two digests");
    let write = rows
        .iter()
        .find(|r| r["tool"] == "write_file")
        .expect("write row");
    assert_eq!(write["outcome"], "ok");
    assert_eq!(write["arguments"]["path"], "big.txt");
    assert_eq!(write["arguments"]["content"], cut(&content));
    let (_, _, verified) = gw.post("/v1/audit/verify", json!({})).await;
    assert_eq!(verified["verified"], true, "{verified}");
}

/// One verification of a tenant's log at a time on an instance: while one reads (held
/// here by a lock on the audit table), another by the same tenant is refused at once
/// with 429 and `Retry-After`, and counted; another tenant's is not refused; once the
/// first answers, the tenant may verify again. (Before: any number ran at once, each
/// reading and hashing the whole chain, taking the instance's cores from every tenant.)
#[tokio::test]
async fn a_tenant_verifies_its_log_once_at_a_time() {
    let db = PgDb::create().await;
    let gw = Gateway::start_on(&db, |_| {}).await;
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "to verify"}}))
        .await;
    assert_eq!(status, 200);
    let other = client_with_key(&gw.create_tenant("globex").await);
    let verify = |client: reqwest::Client| {
        let url = gw.url("/v1/audit/verify");
        async move {
            read(
                client
                    .post(url)
                    .json(&json!({}))
                    .send()
                    .await
                    .expect("verify"),
            )
            .await
        }
    };

    let mut locker = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    sqlx::query("begin")
        .execute(&mut locker)
        .await
        .expect("begin");
    sqlx::query("lock table audit_log in access exclusive mode")
        .execute(&mut locker)
        .await
        .expect("lock");
    // Four at once: one takes the tenant's place and waits on the lock, the others are
    // refused at once.
    let mut asked: Vec<_> = (0..4)
        .map(|_| tokio::spawn(verify(gw.http.clone())))
        .collect();
    let theirs = tokio::spawn(verify(other.clone()));
    for _ in 0..80 {
        if asked.iter().filter(|a| a.is_finished()).count() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (done, waiting): (Vec<_>, Vec<_>) = asked.drain(..).partition(|a| a.is_finished());
    assert_eq!((done.len(), waiting.len()), (3, 1), "one waits on the lock");
    for refused in done {
        let (status, _, body) = refused.await.expect("join");
        assert_eq!(
            (status, &body["details"]["retry_after_secs"]),
            (429, &json!(5)),
            "{body}"
        );
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("being verified")),
            "{body}"
        );
    }
    assert!(
        !theirs.is_finished(),
        "another tenant's waits on the lock, not refused"
    );
    sqlx::query("rollback")
        .execute(&mut locker)
        .await
        .expect("unlock");

    let first = waiting.into_iter().next().expect("the one waiting");
    let (status, _, body) = first.await.expect("join");
    assert_eq!((status, &body["verified"]), (200, &json!(true)), "{body}");
    let (status, _, body) = theirs.await.expect("join");
    assert_eq!(
        (status, &body["verified"]),
        (200, &json!(true)),
        "another tenant's: {body}"
    );
    let (status, _, body) = verify(gw.http.clone()).await;
    assert_eq!(
        (status, &body["verified"]),
        (200, &json!(true)),
        "again after: {body}"
    );
    assert_eq!(gw.rejections("verifications").await, 3.0);
    gw.stop().await;
    db.drop_db().await;
}
