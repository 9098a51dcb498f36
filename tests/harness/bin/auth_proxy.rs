//! `toolgate-auth-proxy TARGET KEY_FILE [LISTEN]`: a loopback reverse proxy that adds
//! `Authorization: Bearer <the key in KEY_FILE>` to every request and forwards it to
//! TARGET (e.g. `http://127.0.0.1:8080`) as it came, for MCP peers that send no
//! credentials, such as the conformance suite (`tests/clients/conformance.sh`). LISTEN
//! defaults to `127.0.0.1:0`; the address bound is printed as the proxy's base URL.

use std::process::ExitCode;

use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (target, key_file, listen) = match args.as_slice() {
        [target, key_file] => (target, key_file, "127.0.0.1:0"),
        [target, key_file, listen] => (target, key_file, listen.as_str()),
        _ => {
            eprintln!("usage: toolgate-auth-proxy TARGET KEY_FILE [LISTEN]");
            return ExitCode::from(2);
        }
    };
    match bind(key_file, listen).await {
        Ok((listener, key)) => {
            toolgate_e2e::serve_auth_proxy(listener, target.clone(), key).await;
            eprintln!("toolgate-auth-proxy: the listener failed");
        }
        Err(err) => eprintln!("toolgate-auth-proxy: {err}"),
    }
    ExitCode::FAILURE
}

/// The key, and the listener on `listen`, whose address is printed.
async fn bind(key_file: &str, listen: &str) -> Result<(TcpListener, String), String> {
    let key = std::fs::read_to_string(key_file).map_err(|e| format!("reading {key_file}: {e}"))?;
    if key.trim().is_empty() {
        return Err(format!("{key_file} holds no key"));
    }
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("binding {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("http://{addr}");
    Ok((listener, key))
}
