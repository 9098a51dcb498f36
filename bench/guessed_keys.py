"""A client guessing API keys beside the clients it should not hurt, with
`http.unknown_keys_per_minute` off (0) and on (60) in one run, alternated.

GUESSERS threads send `GET /v1/me` with a new random well-formed key each time, as one
client address (`X-Forwarded-For`, the gateway trusting loopback as its proxy), for
SECONDS; beside them one client with a key in use calls `GET /v1/me` and one client a
new key, never used before, (a cache miss, as a key is every 30 s) both every 20 ms, and
a probe reads `/readyz` every 100 ms. Prints, per round, the guesses answered a second,
the gateway's CPU per guess (µs, user+system), and the other clients' p50/p99 (ms) and
failures; then the medians.

    python3 bench/guessed_keys.py target/release [SECONDS] [GUESSERS] [ROUNDS]

With PG=1 each gateway keeps its store in a database of its own on the local Postgres
(postgres@127.0.0.1:5432, dropped after), where a key lookup is a round trip.
"""
import http.client
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

bin_dir = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10
guessers = int(sys.argv[3]) if len(sys.argv) > 3 else 8
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def call(conn, method, path, key=None, body=None, forwarded=None):
    headers = {}
    if key:
        headers["authorization"] = "Bearer " + key
    if forwarded:
        headers["x-forwarded-for"] = forwarded
    data = None
    if body is not None:
        headers["content-type"] = "application/json"
        data = json.dumps(body)
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    return response.status, payload


def one_round(per_minute):
    port = free_port()
    data = tempfile.mkdtemp()
    config = os.path.join(data, "toolgate.toml")
    database = None
    with open(config, "w") as f:
        f.write(
            f'[http]\ntrusted_proxies = ["127.0.0.1"]\nunknown_keys_per_minute = {per_minute}\n'
        )
        if os.environ.get("PG"):
            database = f"tg_bench_guess_{os.getpid()}_{per_minute}"
            subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", database], check=True)
            f.write(f'[database]\nurl = "postgres://postgres@127.0.0.1:5432/{database}"\n')
    gateway = subprocess.Popen(
        [os.path.join(bin_dir, "toolgate"), "serve", "--config", config,
         "--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(data, "d")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        key_file = os.path.join(data, "d", "admin-api-key")
        for _ in range(300):
            if os.path.exists(key_file):
                break
            time.sleep(0.1)
        admin = open(key_file).read().strip()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(100):
            try:
                if call(conn, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            time.sleep(0.1)
        # New keys for the client whose keys are never in the cache yet.
        status, who = call(conn, "POST", "/v1/principals", admin, {"name": "fresh"})
        who = json.loads(who)["id"]
        fresh = []
        for i in range(int(seconds / 0.02) + 50):
            _, made = call(conn, "POST", "/v1/keys", admin, {"name": f"k{i}", "principal_id": who})
            fresh.append(json.loads(made)["secret"])
        call(conn, "GET", "/v1/me", admin)
        stop = threading.Event()
        guessed = [0] * guessers
        answers = {}
        lock = threading.Lock()

        def guess(i):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            while not stop.is_set():
                key = "tg_" + secrets.token_hex(32)
                status, _ = call(c, "GET", "/v1/me", key, forwarded="203.0.113.7")
                guessed[i] += 1
                with lock:
                    answers[status] = answers.get(status, 0) + 1

        latencies = {"in use": [], "new key": [], "readyz": []}
        failures = {name: 0 for name in latencies}

        def steady(name, path, keys, every):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            while not stop.is_set():
                started = time.monotonic()
                status, _ = call(c, "GET", path, next(keys))
                took = time.monotonic() - started
                latencies[name].append(took * 1000)
                if status != 200:
                    failures[name] += 1
                time.sleep(max(0.0, every - took))

        def repeat(value):
            while True:
                yield value

        threads = [threading.Thread(target=guess, args=(i,)) for i in range(guessers)]
        threads += [
            threading.Thread(target=steady, args=("in use", "/v1/me", repeat(admin), 0.02)),
            threading.Thread(target=steady, args=("new key", "/v1/me", iter(fresh), 0.02)),
            threading.Thread(target=steady, args=("readyz", "/readyz", repeat(None), 0.1)),
        ]
        cpu_before, started = cpu_seconds(gateway.pid), time.monotonic()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(gateway.pid) - cpu_before
        total = sum(guessed)

        def pct(values, q):
            values = sorted(values)
            return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

        return {
            "unknown_keys_per_minute": per_minute,
            "guesses_per_s": round(total / elapsed),
            "answers": answers,
            "cpu_us_per_guess": round(cpu / max(total, 1) * 1e6, 1),
            "others": {
                name: {"p50_ms": round(pct(v, 0.5), 2), "p99_ms": round(pct(v, 0.99), 2),
                       "n": len(v), "failed": failures[name]}
                for name, v in latencies.items()
            },
        }
    finally:
        gateway.terminate()
        gateway.wait()
        shutil.rmtree(data, ignore_errors=True)
        if database:
            subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", database], check=False)


results = {0: [], 60: []}
for _ in range(rounds):
    for per_minute in (0, 60):
        result = one_round(per_minute)
        print(json.dumps(result), flush=True)
        results[per_minute].append(result)

print("\n| unknown_keys_per_minute | guesses/s | CPU µs per guess | in use p50/p99 ms | new key p50/p99 ms | new key failed | readyz p99 ms |")
print("|---|---:|---:|---:|---:|---:|---:|")
for per_minute, rs in results.items():
    med = lambda f: statistics.median(f(r) for r in rs)
    print(
        f"| {per_minute or 'off'} | {med(lambda r: r['guesses_per_s']):,.0f} | {med(lambda r: r['cpu_us_per_guess']):.1f} "
        f"| {med(lambda r: r['others']['in use']['p50_ms']):.2f} / {med(lambda r: r['others']['in use']['p99_ms']):.2f} "
        f"| {med(lambda r: r['others']['new key']['p50_ms']):.2f} / {med(lambda r: r['others']['new key']['p99_ms']):.2f} "
        f"| {med(lambda r: r['others']['new key']['failed']):.0f} "
        f"| {med(lambda r: r['others']['readyz']['p99_ms']):.2f} |"
    )
