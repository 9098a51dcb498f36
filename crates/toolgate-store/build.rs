//! `sqlx::migrate!` embeds the migrations at compile time, but cargo does not know it
//! reads them: without this, a new migration file was left out of the next build.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
