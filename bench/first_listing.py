"""What an upstream's first listing of TOOLS tools costs while calls go on: an operator's
stdio upstream (tests/clients/relisting_server.py with RELIST_FRESH) lists `ping` and
TOOLS-1 tools the gateway has never seen, each of which vetting pins in the store. For
each binary directory given (alternated, ROUNDS rounds), prints the seconds from the
gateway's start until the listing's last tool is offered, the gateway's CPU seconds by
then, and the p50/p99/max of `echo` calls made every 20 ms meanwhile (ms; the key's
first call left out); then the medians.
The pin mode is PIN (default `quarantine`); with PG=1 each gateway keeps its store in a
database of its own on the local Postgres.

    python3 bench/first_listing.py TOOLS ROUNDS BIN_DIR [BIN_DIR ...]
"""
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

tools, rounds = int(sys.argv[1]), int(sys.argv[2])
bins = sys.argv[3:]
TICK = os.sysconf("SC_CLK_TCK")
server = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "clients", "relisting_server.py")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def get(conn, path, key=None, body=None):
    headers = {"authorization": "Bearer " + key} if key else {}
    if body is not None:
        headers["content-type"] = "application/json"
    conn.request("POST" if body is not None else "GET", path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    return response.status


def one_round(bin_dir, n):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tempfile.mkdtemp()
    config = os.path.join(data, "toolgate.toml")
    database = None
    with open(config, "w") as f:
        f.write(
            '[[upstreams]]\nname = "r"\ncommand = "python3"\n'
            f'args = ["{os.path.abspath(server)}"]\npin = "{os.environ.get("PIN", "quarantine")}"\n'
            f'env = {{ RELIST_COUNT = "{os.path.join(data, "listings")}", RELIST_FRESH = "{tools - 1}" }}\n'
        )
        if os.environ.get("PG"):
            database = f"tg_bench_first_{os.getpid()}_{n}"
            subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", database], check=True)
            f.write(f'[database]\nurl = "postgres://postgres@127.0.0.1:5432/{database}"\n')
    started = time.monotonic()
    gateway = subprocess.Popen(
        [os.path.join(bin_dir, "toolgate"), "serve", "--config", config,
         "--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(data, "d")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        key_file = os.path.join(data, "d", "admin-api-key")
        while not os.path.exists(key_file) or not open(key_file).read().strip():
            time.sleep(0.01)
        key = open(key_file).read().strip()
        stop, took, when = threading.Event(), [], []

        def calls():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = json.dumps({"arguments": {"message": "hi"}})
            warm = False
            while not stop.is_set():
                begun = time.monotonic()
                try:
                    get(conn, "/v1/tools/echo/invoke", key, body)
                except OSError:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    time.sleep(0.01)
                    continue
                # The key's first use (hashed, looked up) is not the store's wait.
                if warm:
                    took.append((time.monotonic() - begun) * 1000)
                    when.append((took[-1], begun))
                warm = True
                time.sleep(0.02)

        caller = threading.Thread(target=calls)
        caller.start()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        last = f"/v1/tools/r__t1_{tools - 2}"
        while True:
            try:
                if get(conn, last, key) == 200:
                    break
            except OSError:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            time.sleep(0.02)
        offered = time.monotonic()
        wall, cpu = offered - started, cpu_seconds(gateway.pid)
        stop.set()
        caller.join()
        took.sort()
        p = lambda q: took[min(len(took) - 1, int(q * len(took)))] if took else float("nan")
        # When the slowest call began, in seconds before the tools were offered.
        slowest = offered - max(when)[1] if when else float("nan")
        return wall, cpu, p(0.5), p(0.99), took[-1] if took else float("nan"), len(took), slowest
    finally:
        gateway.terminate()
        gateway.wait()
        shutil.rmtree(data, ignore_errors=True)
        if database:
            subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", database], check=False)


results = {b: [] for b in bins}
for r in range(rounds):
    for i, b in enumerate(bins):
        wall, cpu, p50, p99, top, calls, slowest = one_round(b, r * len(bins) + i)
        results[b].append((wall, cpu, p50, p99, top))
        print(f"round {r + 1} {b}: offered after {wall:.2f} s, {cpu:.2f} s of CPU; {calls} echo calls, p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {top:.1f} ms (begun {slowest:.2f} s before)", flush=True)
store = "Postgres" if os.environ.get("PG") else "SQLite"
print(f"\n| binary ({store}, {tools} new tools) | seconds until offered | gateway CPU s | echo p50 / p99 / max ms |")
print("|---|---:|---:|---:|")
for b, values in results.items():
    med = lambda i: statistics.median(v[i] for v in values)
    print(f"| {b} | {med(0):.2f} | {med(1):.2f} | {med(2):.1f} / {med(3):.1f} / {med(4):.1f} |")
