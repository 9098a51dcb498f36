"""What listing an upstream again costs the gateway: an operator's stdio upstream
(tests/clients/relisting_server.py) lists TOOLS unchanged tools and announces
`list_changed` after every listing, so the gateway lists it once a second. For each
binary directory given (alternated, ROUNDS rounds), prints the gateway's CPU per listing
(ms, user+system, over SECONDS once the first listing is done) and the p50/p99 of
`echo` calls made every 20 ms meanwhile (ms), and then the medians.

    python3 bench/relisting.py SECONDS TOOLS ROUNDS BIN_DIR [BIN_DIR ...]
"""
import json
import os
import shutil
import threading
import urllib.request
import socket
import statistics
import subprocess
import sys
import tempfile
import time

seconds, tools, rounds = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
bins = sys.argv[4:]
TICK = os.sysconf("SC_CLK_TCK")
server = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "clients", "relisting_server.py")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def listings(path):
    try:
        return int(open(path).read().strip() or 0)
    except (OSError, ValueError):
        return 0


def one_round(bin_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tempfile.mkdtemp()
    count = os.path.join(data, "listings")
    config = os.path.join(data, "toolgate.toml")
    with open(config, "w") as f:
        f.write(
            '[[upstreams]]\nname = "r"\ncommand = "python3"\n'
            f'args = ["{os.path.abspath(server)}"]\n'
            f'env = {{ RELIST_COUNT = "{count}", RELIST_TOOLS = "{tools}" }}\n'
        )
    gateway = subprocess.Popen(
        [os.path.join(bin_dir, "toolgate"), "serve", "--config", config,
         "--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(data, "d")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            if listings(count) >= 2:
                break
            time.sleep(0.1)
        time.sleep(1.5)
        key = open(os.path.join(data, "d", "admin-api-key")).read().strip()
        stop, took = threading.Event(), []

        def calls():
            body = json.dumps({"arguments": {"message": "hi"}}).encode()
            while not stop.is_set():
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/tools/echo/invoke", data=body,
                    headers={"authorization": "Bearer " + key, "content-type": "application/json"})
                started = time.monotonic()
                urllib.request.urlopen(request, timeout=60).read()
                took.append((time.monotonic() - started) * 1000)
                time.sleep(0.02)

        caller = threading.Thread(target=calls)
        n0, cpu0 = listings(count), cpu_seconds(gateway.pid)
        caller.start()
        time.sleep(seconds)
        stop.set()
        caller.join()
        n1, cpu1 = listings(count), cpu_seconds(gateway.pid)
        took.sort()
        p = lambda q: took[min(len(took) - 1, int(q * len(took)))]
        return (cpu1 - cpu0) * 1000 / max(n1 - n0, 1), n1 - n0, p(0.5), p(0.99)
    finally:
        gateway.terminate()
        gateway.wait()
        shutil.rmtree(data, ignore_errors=True)


results = {b: [] for b in bins}
for r in range(rounds):
    for b in bins:
        ms, n, p50, p99 = one_round(b)
        results[b].append((ms, n, p50, p99))
        print(f"round {r + 1} {b}: {ms:.1f} ms of CPU per listing ({n} listings); echo p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
print(f"\n| binary | CPU per listing of {tools} unchanged tools, ms | listings in {seconds:g} s | echo p50 / p99 ms |")
print("|---|---:|---:|---:|")
for b, values in results.items():
    med = lambda i: statistics.median(v[i] for v in values)
    print(f"| {b} | {med(0):.1f} | {med(1):.0f} | {med(2):.1f} / {med(3):.1f} |")
