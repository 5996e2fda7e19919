#!/usr/bin/env python3
"""Runs established secret scanners over the secret guard's evaluation prompts, offline, and
prints their recall and false-positive rate next to ours (docs/POLICY.md, "Secret guard").

  scripts/secret-peers.py [--corpus fixtures/secrets/eval] [--tools DIR] [--only NAME] [--jobs N]

Each prompt of <corpus>/secrets.txt and <corpus>/ordinary.txt is written to its own file
(⏎ turned back into line breaks); a scanner "flags" a prompt when it reports at least one
finding in that prompt's file. Peers:

  secretlint (npm) with @secretlint/secretlint-rule-preset-recommend, `--format json`, one
  process per share of the files (--jobs, default 2), never one per prompt;
  detect-secrets (PyPI) `scan --all-files` with its default plugins and filters.

Install them once (not part of the test suite; only the package registries are needed):

  npm install --prefix DIR secretlint @secretlint/secretlint-rule-preset-recommend
  python3 -m venv DIR/venv && DIR/venv/bin/pip install detect-secrets

DIR defaults to $SECRET_PEERS_DIR, else /work/peer-tools. A peer that is not installed is
skipped. Our own figures come from `cargo test -p bridge-policy --test tests secret_guard::`.
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile

NL = "\u23ce"


def load(path):
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            label, prompt = line.split("\t", 1)
            rows.append((label.split("/", 1)[0], prompt.replace(NL, "\n")))
    return rows


def write_prompts(work, secrets, ordinary):
    names = {}
    for tag, rows in (("s", secrets), ("o", ordinary)):
        for i, (family, prompt) in enumerate(rows):
            name = f"{tag}{i:05d}.txt"
            with open(os.path.join(work, name), "w", encoding="utf-8") as fh:
                fh.write(prompt + "\n")
            names[name] = (tag, family)
    return names


def find_tool(installed, name):
    """The peer's executable: under the tools dir, else on PATH, else None."""
    return installed if os.path.exists(installed) else shutil.which(name)


def run_secretlint(tools, work, jobs):
    exe = find_tool(os.path.join(tools, "node_modules", ".bin", "secretlint"), "secretlint")
    if not exe:
        return None
    rc = os.path.join(work, ".secretlintrc.json")
    with open(rc, "w") as fh:
        json.dump({"rules": [{"id": "@secretlint/secretlint-rule-preset-recommend"}]}, fh)
    env = dict(os.environ, NODE_PATH=os.path.join(tools, "node_modules"))
    files = sorted(f for f in os.listdir(work) if f.endswith(".txt"))
    shares = [files[i::jobs] for i in range(jobs)]
    procs = []
    for i, share in enumerate(shares):
        out = open(os.path.join(work, f"secretlint-{i}.json"), "w")
        procs.append((subprocess.Popen(
            [exe, "--format", "json", "--secretlintrc", rc, "--no-color",
             "--output", os.path.join(work, f"secretlint-{i}.out.json")]
            + [os.path.join(work, f) for f in share],
            cwd=tools, stdout=out, stderr=subprocess.PIPE, text=True, env=env), out, i))
    flagged = set()
    for proc, out, i in procs:
        _, err = proc.communicate()
        out.close()
        results = None
        for path in (f"secretlint-{i}.out.json", f"secretlint-{i}.json"):
            try:
                with open(os.path.join(work, path), encoding="utf-8") as fh:
                    text = fh.read().strip()
                # the first JSON value: anything printed after it is not part of the report
                results, _ = json.JSONDecoder().raw_decode(text)
                break
            except (OSError, ValueError):
                continue
        if results is None:
            sys.exit(f"secretlint: unreadable output (exit {proc.returncode}): {err[:400]}")
        flagged |= {os.path.basename(r["filePath"]) for r in results if r.get("messages")}
    return flagged


def run_detect_secrets(tools, work, _jobs):
    exe = find_tool(os.path.join(tools, "venv", "bin", "detect-secrets"), "detect-secrets")
    if not exe:
        return None
    proc = subprocess.run([exe, "scan", "--all-files", "."], cwd=work,
                          capture_output=True, text=True)
    data = json.loads(proc.stdout)
    return {os.path.basename(f) for f, found in data.get("results", {}).items() if found}


def report(tool, flagged, names):
    per = collections.defaultdict(lambda: [0, 0])
    for name, (tag, family) in names.items():
        key = (tag, family)
        per[key][0] += 1
        per[key][1] += name in flagged
    s_total = sum(v[0] for k, v in per.items() if k[0] == "s")
    s_hit = sum(v[1] for k, v in per.items() if k[0] == "s")
    o_total = sum(v[0] for k, v in per.items() if k[0] == "o")
    o_hit = sum(v[1] for k, v in per.items() if k[0] == "o")
    print(f"{tool}: recall {s_hit * 100 / s_total:.2f}% ({s_hit}/{s_total}), "
          f"false positives {o_hit * 100 / o_total:.2f}% ({o_hit}/{o_total})")
    for (tag, family), (n, hit) in sorted(per.items()):
        what = "recall" if tag == "s" else "false positives"
        print(f"  {what} {family}: {hit * 100 / n:.2f}% ({hit}/{n})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="fixtures/secrets/eval")
    ap.add_argument("--tools", default=os.environ.get("SECRET_PEERS_DIR", "/work/peer-tools"))
    ap.add_argument("--only", choices=["detect-secrets", "secretlint"])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    secrets = load(os.path.join(args.corpus, "secrets.txt"))
    ordinary = load(os.path.join(args.corpus, "ordinary.txt"))
    with tempfile.TemporaryDirectory(prefix="secret-peers-") as work:
        names = write_prompts(work, secrets, ordinary)
        for tool, runner in (("detect-secrets (defaults)", run_detect_secrets),
                             ("secretlint (recommended preset)", run_secretlint)):
            if args.only and not tool.startswith(args.only):
                continue
            flagged = runner(args.tools, work, max(1, args.jobs))
            if flagged is None:
                print(f"{tool}: not installed, skipped")
                continue
            report(tool, flagged, names)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
