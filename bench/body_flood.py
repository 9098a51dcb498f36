"""Memory held by request bodies that never finish: a gateway's RSS before and after N
connections (alternately REST invoke and MCP `tools/call`, one tenant's key) each send
all but the last byte of a BYTES-long body and wait. Without a bound on the body bytes
held at once, every one of them is held whole; with `http.max_body_bytes_in_flight*`,
those past the tenant's share are answered 429 at once and let go of.

    python3 bench/body_flood.py target/release [N] [BYTES]
"""
import os, shutil, socket, subprocess, sys, tempfile, time

bin_dir = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
size = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
data = tempfile.mkdtemp()
gateway = subprocess.Popen(
    [os.path.join(bin_dir, "toolgate"), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)


def rss_kib():
    for line in open(f"/proc/{gateway.pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])


try:
    key_file = os.path.join(data, "admin-api-key")
    for _ in range(300):
        if os.path.exists(key_file):
            break
        time.sleep(0.1)
    key = open(key_file).read().strip()
    time.sleep(1)
    before = rss_kib()
    open_sockets, answered = [], 0
    for i in range(n):
        path = "/v1/tools/echo/invoke" if i % 2 == 0 else "/mcp"
        extra = "" if i % 2 == 0 else "accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n"
        head = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {key}\r\n"
            f"content-type: application/json\r\n{extra}content-length: {size}\r\n\r\n"
        )
        c = socket.create_connection(("127.0.0.1", port))
        c.settimeout(5)
        try:
            c.sendall(head.encode() + b" " * (size - 1))
        except OSError:
            pass  # answered and closed before the body was sent
        open_sockets.append(c)
    time.sleep(2)
    after = rss_kib()
    for c in open_sockets:
        c.setblocking(False)
        try:
            answered += c.recv(64).startswith(b"HTTP/1.1 4")
        except OSError:
            pass
    print(
        f"{n} bodies of {size} bytes, all but the last byte sent: RSS {before / 1024:.0f} -> "
        f"{after / 1024:.0f} MiB; {answered} answered 4xx at once"
    )
finally:
    gateway.kill()
    gateway.wait()
    shutil.rmtree(data, ignore_errors=True)
