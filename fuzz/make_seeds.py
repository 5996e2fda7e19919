#!/usr/bin/env python3
"""Regenerates the seed corpora under fuzz/corpus/ (run from the repository root).

Sources: the observed `opencode run --format json` samples (shared reference file, path as the
first argument), the SQLite fixture store fixtures/opencode-store/opencode.db, and the v2 reply
fixtures under fixtures/api-v2/service/. Seeds are small on purpose; hand-written seeds
(names starting with `hand-`) are kept.
"""
import json, os, sqlite3, sys

root = os.getcwd()
corpus = os.path.join(root, "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# event_lines: stdout lines, NUL, stderr (one seed per observed run)
samples = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/reference/opencode-1.18-run-samples.txt"
name, out, err = None, [], []
def flush():
    if name:
        write("event_lines", "run-" + name, "\n".join(out).encode() + b"\n\0" + "\n".join(err).encode())
for line in open(samples, encoding="utf-8").read().split("\n"):
    if line.startswith("### "):
        flush()
        name, out, err, in_err = line[4:].split(" ")[0], [], [], False
    elif line.startswith("stderr: "):
        err.append(line[len("stderr: "):])
    elif err:
        err.append(line)
    elif line.strip():
        out.append(line)
flush()

# store_rows: message data NUL part data NUL part data ...
db = sqlite3.connect(os.path.join(root, "fixtures", "opencode-store", "opencode.db"))
for i, (mid, data) in enumerate(db.execute("select id, data from message order by time_created")):
    parts = [r[0] for r in db.execute("select data from part where message_id = ? order by id", (mid,))]
    write("store_rows", "msg-%02d" % i, b"\0".join([data.encode()] + [p.encode() for p in parts]))

# service_json: v2 replies as they are, v1 {info, parts} messages and v1 sessions from the store
svc = os.path.join(root, "fixtures", "api-v2", "service")
for f in sorted(os.listdir(svc)):
    if f.endswith(".json"):
        write("service_json", "v2-" + f[:-5], open(os.path.join(svc, f), "rb").read())
for i, (mid, sid, data) in enumerate(db.execute("select id, session_id, data from message order by time_created limit 12")):
    info = json.loads(data)
    info.update(id=mid, sessionID=sid)
    parts = []
    for pid, pdata in db.execute("select id, data from part where message_id = ? order by id", (mid,)):
        p = json.loads(pdata)
        p.update(id=pid, messageID=mid, sessionID=sid)
        parts.append(p)
    write("service_json", "v1-message-%02d" % i, json.dumps({"info": info, "parts": parts}).encode())
sessions = []
for sid, title, directory, project, parent, version, created, updated, agent, model in db.execute(
        "select id, title, directory, project_id, parent_id, version, time_created, time_updated, agent, model from session order by time_created"):
    s = {"id": sid, "title": title, "directory": directory, "projectID": project, "version": version,
         "time": {"created": created, "updated": updated}}
    if parent:
        s["parentID"] = parent
    if agent:
        s["agent"] = agent
    if model:
        s["model"] = json.loads(model)
    sessions.append(s)
write("service_json", "v1-sessions", json.dumps(sessions).encode())
