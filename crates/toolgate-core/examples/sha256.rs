//! SHA-256 of a 700-byte input (about an audit row's hashed text), by `toolgate_core::sha256`
//! (ring) and by the sha2 crate, alternated in one run: µs per digest and the ratio. The two
//! differ most on CPUs without the SHA extensions, where sha2 runs scalar rounds.
//!
//!   cargo run --release -p toolgate-core --example sha256

use std::time::Instant;

use sha2::Digest as _;

fn main() {
    let row: Vec<u8> = (0..700u32).map(|i| (i * 31 % 251) as u8).collect();
    let n = 200_000;
    let per_digest = |hash: &dyn Fn(&[u8]) -> u8| {
        let started = Instant::now();
        let mut seen = 0u8;
        for _ in 0..n {
            seen ^= hash(std::hint::black_box(&row));
        }
        std::hint::black_box(seen);
        started.elapsed().as_secs_f64() / f64::from(n) * 1e6
    };
    println!("| round | sha2 µs | toolgate_core::sha256 (ring) µs | ratio |");
    println!("|---:|---:|---:|---:|");
    for round in 1..=3 {
        let sha2 = per_digest(&|b| sha2::Sha256::digest(b)[0]);
        let ring = per_digest(&|b| toolgate_core::sha256(b)[0]);
        println!("| {round} | {sha2:.2} | {ring:.2} | {:.2} |", ring / sha2);
    }
}
