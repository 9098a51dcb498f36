"""Sequential REST invokes of `echo` over one keep-alive connection, for
bench/traces.sh: `python3 bench/rest_calls.py PORT KEY N`. Any answer but 200 stops it."""

import http.client
import json
import sys

port, key, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
body = json.dumps({"arguments": {"message": "hello, toolgate"}})
for _ in range(n):
    conn.request("POST", "/v1/tools/echo/invoke", body, headers)
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        sys.exit(f"{response.status} {data!r}")
