//! What checking a call's arguments against a schema `pattern` costs, by regex engine:
//! jsonschema's default (fancy-regex, backtracking on backreferences and lookaround)
//! against the linear-time engine toolgate compiles schemas with
//! (`toolgate_core::schema_validator`). Run with
//! `cargo run --release -p toolgate-core --example schema_patterns`; figures in
//! docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn schema(pattern: &str) -> Value {
    json!({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string", "pattern": pattern}}}})
}

/// `n` strings of `len` `a`s then a `b`.
fn arguments(n: usize, len: usize) -> Value {
    json!({"xs": vec![format!("{}b", "a".repeat(len)); n]})
}

/// The time a call's check takes as the registry makes it (`is_valid`, then every
/// violation listed).
fn check(validator: &jsonschema::Validator, args: &Value) -> Duration {
    let start = Instant::now();
    if !validator.is_valid(args) {
        std::hint::black_box(validator.iter_errors(args).count());
    }
    start.elapsed()
}

fn main() {
    let backtracking = r"^((a|aa)+)\1c";
    let plain = r"^(a|aa)+c$";
    println!("| pattern | arguments | body bytes | default engine | toolgate |");
    println!("|---|---|---:|---:|---|");
    for (pattern, n, len) in [
        (backtracking, 1, 24),
        (backtracking, 40, 24),
        (plain, 40, 24),
        (plain, 30_000, 30),
    ] {
        let args = arguments(n, len);
        let fancy = jsonschema::validator_for(&schema(pattern)).expect("compiles");
        let default = check(&fancy, &args);
        let ours = match toolgate_core::schema_validator(&schema(pattern)) {
            Ok(linear) => format!("{:.2?}", check(&linear, &args)),
            Err(_) => "refused at registration".into(),
        };
        println!(
            "| `{pattern}` | {n} × {} chars | {} | {default:.2?} | {ours} |",
            len + 1,
            args.to_string().len()
        );
    }
}
