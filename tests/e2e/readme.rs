//! The README's agent walk-through, as a reader follows it: its `[providers.local]` block
//! as the configuration (the local server's URL swapped for a fake that speaks OpenAI's
//! wire format), its request bodies as written, its `jq -r .id` picks.

use serde_json::{Value, json};
use toolgate_e2e::llm::{MockLlm, Reply, Wire, says};
use toolgate_e2e::{Gateway, client_with_key};

const README: &str = include_str!("../../README.md");

/// The fenced block of `lang` that contains `marker`.
fn block(lang: &str, marker: &str) -> String {
    README
        .split(&format!("```{lang}\n"))
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .find(|block| block.contains(marker))
        .unwrap_or_else(|| panic!("a ```{lang} block with {marker} in README.md"))
        .to_owned()
}

/// The `-d '…'` bodies of a shell block, in order, with the shell's `'$NAME'` splices
/// replaced by `vars`.
fn bodies(sh: &str, vars: &[(&str, &str)]) -> Vec<Value> {
    let mut sh = sh.to_owned();
    for (name, value) in vars {
        sh = sh.replace(&format!("'${name}'"), value);
    }
    sh.split("-d '")
        .skip(1)
        .map(|rest| {
            let body = rest.split_once('\'').expect("a closing quote").0;
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{body}: {e}"))
        })
        .collect()
}

#[tokio::test]
async fn the_readmes_agent_walk_through_runs_against_a_local_openai_compatible_server() {
    let toml = block("toml", "[providers.local]");
    let url = toml
        .split('"')
        .find(|s| s.starts_with("http://127.0.0.1"))
        .expect("the local server's URL")
        .to_owned();
    let sh = block("sh", "\"provider\":\"local\"");
    let [agent, run] = <[Value; 2]>::try_from(bodies(&sh, &[])).expect("an agent and a run body");

    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "call_1",
                "read_file",
                r#"{"path":"hello.txt"}"#,
            )])),
            Reply::ok(says::openai_text("It says: hello from the workspace")),
        ],
    )
    .await;
    let config: toolgate_server::config::Config =
        ::toml::from_str(&toml.replace(&url, &mock.base)).expect("the README's provider block");
    let gw = Gateway::start_with(move |c| c.providers = config.providers).await;
    // From the curl walk-through above it.
    std::fs::write(
        gw.workspace().join("hello.txt"),
        "hello from the workspace\n",
    )
    .expect("write");

    let (status, _, created) = gw.post("/v1/agents", agent).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("jq -r .id: the agent");
    assert!(
        sh.contains("/v1/agents/$AGENT/runs"),
        "the walk-through runs $AGENT"
    );
    let (status, _, ran) = gw.post(&format!("/v1/agents/{id}/runs"), run).await;
    assert!((200..300).contains(&status), "{status} {ran}");
    let run = ran["id"].as_str().expect("jq -r .id: the run");
    let (status, _, view) = gw.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(status, 200);
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["output"], "It says: hello from the workspace");
    assert!(view["usage"].is_object(), "{view}");

    // The model named, the tools declared, and the file's text given back to it.
    let asked = mock.requests();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].body["model"], created["model"]);
    let declared: Vec<&str> = asked[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(declared, ["read_file", "search_files"]);
    assert!(
        asked[1]
            .body
            .to_string()
            .contains("hello from the workspace"),
        "{}",
        json!(asked[1].body)
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_readmes_second_principal_decides_the_held_call_of_the_approvals_walk_through() {
    let gw = Gateway::start().await;
    let people = block("sh", "RITA=$(");
    // The key's body names the principal, made first.
    let principal = bodies(&people, &[("RITA", "not yet")]).remove(0);
    let (status, _, rita) = gw.post("/v1/principals", principal).await;
    assert_eq!(status, 201, "{rita}");
    let rita_id = rita["id"].as_str().expect("jq -r .id");
    let [_, key] = <[Value; 2]>::try_from(bodies(&people, &[("RITA", rita_id)]))
        .expect("the principal and key bodies");
    let (status, _, key) = gw.post("/v1/keys", key).await;
    assert_eq!(status, 201, "{key}");
    let rita = client_with_key(key["secret"].as_str().expect("jq -r .secret"));
    let me: Value = rita
        .get(gw.url("/v1/me"))
        .send()
        .await
        .expect("me")
        .json()
        .await
        .expect("json");
    assert!(
        me["scopes"]
            .as_array()
            .expect("scopes")
            .contains(&json!("approvals:decide")),
        "{me}"
    );

    let walk = block("sh", "rita()");
    let [policy, call, decision] =
        <[Value; 3]>::try_from(bodies(&walk, &[])).expect("policy, call and decision bodies");
    let put = gw
        .http
        .put(gw.url("/v1/policy"))
        .json(&policy)
        .send()
        .await
        .expect("policy");
    assert_eq!(put.status(), 200);
    let (status, _, held) = gw.post("/v1/tools/execute_command/invoke", call).await;
    assert_eq!(status, 202, "{held}");
    let listed: Value = rita
        .get(gw.url("/v1/approvals"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert!(
        listed
            .to_string()
            .contains(held["approval_id"].as_str().expect("id"))
    );
    let decided = rita
        .post(gw.url(&format!(
            "/v1/approvals/{}",
            held["approval_id"].as_str().expect("jq -r .approval_id")
        )))
        .json(&decision)
        .send()
        .await
        .expect("decide");
    assert!(decided.status().is_success(), "{}", decided.status());
    let status_url = held["status_url"].as_str().expect("jq -r .status_url");
    let mut outcome = Value::Null;
    for _ in 0..100 {
        let (_, _, seen) = gw.get(status_url).await;
        if seen["status"] != "pending" && seen["status"] != "running" {
            outcome = seen;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(outcome["status"], "completed", "{outcome}");
    gw.stop().await;
}
