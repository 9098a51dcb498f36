"""Memory per idle MCP session: RSS of a running gateway before and after opening N
sessions (initialize + initialized, and `logging/setLevel` when LEVEL is set), each
left idle.

    TOOLGATE_MCP__MAX_SESSIONS_PER_PRINCIPAL=100000 TOOLGATE_MCP__MAX_SESSIONS_PER_TENANT=100000 \
      target/release/toolgate serve --listen 127.0.0.1:18080 --data-dir /tmp/tg &
    python3 bench/idle_sessions.py /tmp/tg 2000 [SECONDS_TO_WAIT]
    LEVEL=warning python3 bench/idle_sessions.py /tmp/tg 2000   # each session sets a log level
"""
import http.client, json, sys, os, subprocess
data_dir=sys.argv[1]
key=open(os.path.join(data_dir,'admin-api-key')).read().strip()
pid=int(subprocess.check_output(['pgrep','-f','toolgate serve --listen 127.0.0.1:18080']).split()[0])
def rss():
    for l in open(f'/proc/{pid}/status'):
        if l.startswith('VmRSS'): return int(l.split()[1])
LEVEL=os.environ.get('LEVEL')
H={'authorization':'Bearer '+key,'content-type':'application/json','accept':'application/json, text/event-stream'}
def session(c):
    c.request('POST','/mcp',json.dumps({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"m","version":"1"}}}),H)
    r=c.getresponse(); sid=r.getheader('mcp-session-id'); r.read()
    h=dict(H); h['mcp-session-id']=sid; h['mcp-protocol-version']='2025-11-25'
    c.request('POST','/mcp',json.dumps({"jsonrpc":"2.0","method":"notifications/initialized"}),h); r=c.getresponse(); r.read()
    if LEVEL:
        c.request('POST','/mcp',json.dumps({"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":LEVEL}}),h)
        r=c.getresponse(); r.read()
        assert r.status==200, r.status
    return sid
c=http.client.HTTPConnection('127.0.0.1',18080)
for _ in range(50): session(c)
before=rss()
n=int(sys.argv[2])
sids=[session(c) for _ in range(n)]
import time; time.sleep(1)
after=rss()
print(f"{n} sessions, 1 s after opening: RSS {before} -> {after} KiB, {(after-before)/n:.1f} KiB per session")
# `mcp.session_dormant_secs` (5 by default) and one sweep (every second or more) later,
# sessions that hold nothing beyond their initialize have left memory.
wait=float(sys.argv[3]) if len(sys.argv)>3 else 8
time.sleep(wait)
dormant=rss()
print(f"{n} sessions, {wait+1:.0f} s after opening: RSS {before} -> {dormant} KiB, {(dormant-before)/n:.1f} KiB per session")
# Memory let go of is reused: as many sessions again, left dormant too.
more=[session(c) for _ in range(n)]
time.sleep(wait)
again=rss()
print(f"{n} more sessions, {wait:.0f} s later: RSS {dormant} -> {again} KiB, {(again-dormant)/n:.1f} KiB per session")
def gauge():
    c.request('GET','/metrics',headers={'authorization':H['authorization']}); r=c.getresponse(); text=r.read().decode()
    return next(l.rsplit(' ',1)[1] for l in text.splitlines() if l.startswith('toolgate_mcp_sessions{'))
print(f"sessions in memory (toolgate_mcp_sessions): {gauge()}")
# Each comes back when used (restored from the store).
t=time.time()
for sid in sids:
    h=dict(H); h['mcp-session-id']=sid; h['mcp-protocol-version']='2025-11-25'
    c.request('POST','/mcp',json.dumps({"jsonrpc":"2.0","id":1,"method":"ping"}),h); r=c.getresponse(); r.read()
    assert r.status==200, r.status
print(f"first request on each dormant session (restored): {(time.time()-t)/n*1000:.2f} ms each")
