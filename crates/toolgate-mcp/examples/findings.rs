//! What finding other sources' tool names in upstream tool descriptions costs: the
//! per-name search vetting did until a9e40dd (each name lower-cased and searched for in
//! each description) against `toolgate_mcp::vetting::findings` (names made ready once,
//! each description's candidate words looked up). Both must find the same names. Run
//! with `cargo run --release -p toolgate-mcp --example findings`; figures in
//! docs/BENCHMARKS.md.

use std::time::Instant;

use toolgate_mcp::vetting::{Others, findings};

/// The search as it was: each name in turn, as a word of its own.
fn per_name(description: &str, others: &[String]) -> usize {
    let lower = description.to_lowercase();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    others
        .iter()
        .filter(|other| other.len() >= 4)
        .filter(|other| {
            let name = other.to_lowercase();
            lower.match_indices(&name).any(|(at, _)| {
                !lower[..at].chars().next_back().is_some_and(word)
                    && !lower[at + name.len()..].chars().next().is_some_and(word)
            })
        })
        .count()
}

fn main() {
    println!("| descriptions | other names | per name | once per listing | ratio |");
    println!("|---:|---:|---:|---:|---:|");
    for (tools, names) in [(1_000, 1_000), (2_000, 10_000), (10_000, 10_000)] {
        let others: Vec<String> = (0..names).map(|i| format!("other__tool_{i}")).collect();
        let descriptions: Vec<String> = (0..tools)
            .map(|i| {
                format!(
                    "Tool {i} reads a record from the store and returns it as JSON; see other__tool_{} for writes.",
                    (i * 3) % names
                )
            })
            .collect();
        let started = Instant::now();
        let before: usize = descriptions.iter().map(|d| per_name(d, &others)).sum();
        let slow = started.elapsed();
        let started = Instant::now();
        let ready = Others::new(&others);
        let after: usize = descriptions.iter().map(|d| findings(d, &ready).len()).sum();
        let fast = started.elapsed();
        assert_eq!(before, after, "both find the same names");
        println!(
            "| {tools} | {names} | {slow:.2?} | {fast:.2?} | {:.4} |",
            fast.as_secs_f64() / slow.as_secs_f64()
        );
    }
}
