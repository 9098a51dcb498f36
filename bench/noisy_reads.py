"""One tenant's audit readers against another tenant's requests (see noisy_reads.sh).

python3 bench/noisy_reads.py BASE ADMIN_KEY_FILE setup ROWS
python3 bench/noisy_reads.py BASE ADMIN_KEY_FILE run HAMMERERS SECONDS QUIET_PATH

`setup` makes tenants `noisy` and `quiet` and ROWS audit rows in `noisy` (echo calls);
`run` has HAMMERERS clients of `noisy` ask for `/v1/audit/summary?minutes=1440` without
pause while two clients of `quiet` call QUIET_PATH (GET, or POST an echo invoke) every
50 ms and one client reads `/readyz` every 200 ms; prints one JSON line of counts and the
quiet tenant's latency percentiles.
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request

BASE, KEY_FILE, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
ADMIN = open(KEY_FILE).read().strip()
KEYS = KEY_FILE + ".tenants.json"


def req(method, path, key, body=None):
    headers = {"authorization": "Bearer " + key}
    data = None
    if body is not None:
        headers["content-type"] = "application/json"
        data = json.dumps(body).encode()
    r = urllib.request.Request(BASE + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 0


def count(codes, status):
    codes[status] = codes.get(status, 0) + 1


if MODE == "setup":
    rows = int(sys.argv[4])
    keys = {}
    for name in ("noisy", "quiet"):
        r = urllib.request.Request(
            BASE + "/v1/tenants",
            data=json.dumps({"name": name}).encode(),
            headers={"authorization": "Bearer " + ADMIN, "content-type": "application/json"},
        )
        with urllib.request.urlopen(r) as resp:
            keys[name] = json.load(resp)["admin_key"]["secret"]
    json.dump(keys, open(KEYS, "w"))

    def fill(n):
        for _ in range(n):
            req("POST", "/v1/tools/echo/invoke", keys["noisy"], {"arguments": {"message": "x" * 50}})

    threads = [threading.Thread(target=fill, args=(rows // 16,)) for _ in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
else:
    keys = json.load(open(KEYS))
    hammerers, seconds, quiet_path = int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    stop = time.time() + seconds
    noisy, quiet, ready, latencies = {}, {}, {}, []

    def hammer():
        while time.time() < stop:
            count(noisy, req("GET", "/v1/audit/summary?minutes=1440", keys["noisy"]))

    def calm():
        while time.time() < stop:
            started = time.time()
            if quiet_path.endswith("/invoke"):
                status = req("POST", quiet_path, keys["quiet"], {"arguments": {"message": "q"}})
            else:
                status = req("GET", quiet_path, keys["quiet"])
            latencies.append(time.time() - started)
            count(quiet, status)
            time.sleep(0.05)

    def readiness():
        while time.time() < stop:
            count(ready, req("GET", "/readyz", ADMIN))
            time.sleep(0.2)

    threads = [threading.Thread(target=hammer) for _ in range(hammerers)]
    threads += [threading.Thread(target=calm) for _ in range(2)]
    threads.append(threading.Thread(target=readiness))
    [t.start() for t in threads]
    [t.join() for t in threads]
    latencies.sort()
    pick = lambda q: round(latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1000, 1)
    print(json.dumps({
        "noisy": noisy, "quiet": quiet, "readyz": ready,
        "quiet_p50_ms": pick(0.5), "quiet_p99_ms": pick(0.99),
    }))
