//! The fuzz targets' committed corpora (`fuzz/corpus/<target>/`), replayed as a plain
//! test: every input the fuzzers found worth keeping — and every crash reproducer
//! committed after a fix — runs on each `cargo test`, without libFuzzer.

#[path = "../../../fuzz/targets.rs"]
mod targets;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).expect("corpus input");
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
        inputs += 1;
    }
    assert!(inputs > 0, "{target} has a seed corpus");
}

#[test]
fn jsonrpc_corpus() {
    replay("jsonrpc", targets::jsonrpc);
}

#[test]
fn react_corpus() {
    replay("react", targets::react);
}

#[test]
fn xml_corpus() {
    replay("xml", targets::xml);
}

#[test]
fn providers_corpus() {
    replay("providers", targets::providers);
}

#[test]
fn jwt_corpus() {
    replay("jwt", targets::jwt);
}

#[test]
fn ssrf_corpus() {
    replay("ssrf", targets::ssrf);
}

#[test]
fn workspace_path_corpus() {
    replay("workspace_path", targets::workspace_path);
}

#[test]
fn upstream_sse_corpus() {
    replay("upstream_sse", targets::upstream_sse);
}
