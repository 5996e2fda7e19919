"""An independent MCP client against the built bridge: the official Python MCP SDK over stdio.

Run by bins/opencode-bridge/tests/protocol.rs (`the_python_mcp_sdk_...`) with the venv that
scripts/test.sh installs. Environment:
  BRIDGE_BIN       the built opencode-bridge binary
  BRIDGE_ENV       JSON object: the bridge's environment (isolated HOME/XDG, root, fake opencode, store)
  BRIDGE_CWD       the bridge's working directory
  FIXTURE_SESSION  a session id of the store fixture that ran a bash tool
For each protocol era (legacy `initialize`, and `auto`: `server/discover`) it lists and reads
resources, lists and gets prompts, calls the tools, and validates every structuredContent against
its tool's outputSchema with the `jsonschema` package. Prints one line per check; exits 1 with the
first failure.
"""

import asyncio
import json
import os
import sys

import jsonschema
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

STRUCTURED = {
    "opencode_status",
    "opencode_result",
    "opencode_wait",
    "opencode_list",
    "opencode_policy",
    "opencode_sessions",
    "opencode_processes",
    "opencode_usage",
}


def check(ok, what):
    if not ok:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)


async def run(mode):
    params = StdioServerParameters(
        command=os.environ["BRIDGE_BIN"],
        env=json.loads(os.environ["BRIDGE_ENV"]),
        cwd=os.environ["BRIDGE_CWD"],
    )
    fixture = os.environ["FIXTURE_SESSION"]
    async with Client(params, mode=mode, read_timeout_seconds=60) as client:
        caps = client.server_capabilities
        check(caps.tools is not None and caps.prompts is not None and caps.resources is not None,
              f"{mode}: capabilities tools, prompts and resources: {caps}")
        print(f"{mode}: connected, protocol {client.protocol_version}", flush=True)

        tools = {t.name: t for t in (await client.list_tools()).tools}
        with_schema = {n for n, t in tools.items() if t.output_schema is not None}
        check(with_schema == STRUCTURED, f"{mode}: tools with outputSchema: {sorted(with_schema)}")
        for name in with_schema:
            jsonschema.Draft202012Validator.check_schema(tools[name].output_schema)

        # Resources: the template, the list, a read, a bad id.
        templates = (await client.list_resource_templates()).resource_templates
        check([t.uri_template for t in templates]
              == ["opencode://session/{id}", "opencode://server/{server}/session/{id}"],
              f"{mode}: templates {templates}")
        resources = (await client.list_resources()).resources
        check(0 < len(resources) <= 50, f"{mode}: {len(resources)} resources")
        check(all(str(r.uri).startswith("opencode://session/ses_") for r in resources),
              f"{mode}: resource uris {[str(r.uri) for r in resources]}")
        first = await client.read_resource(str(resources[0].uri))
        check(len(first.contents) == 1 and first.contents[0].text.strip(), f"{mode}: read {first}")
        read = await client.read_resource(f"opencode://session/{fixture}")
        text = read.contents[0].text
        check("-> bash(" in text and read.contents[0].mime_type == "text/plain",
              f"{mode}: transcript of {fixture}: {text[:300]}")
        try:
            await client.read_resource("opencode://session/ses_nosuchsession0000000000")
            check(False, f"{mode}: an unknown session id was read")
        except MCPError as e:
            check(e.error.code == -32602 and "\n" not in e.error.message
                  and "resource not found" in e.error.message,
                  f"{mode}: unknown id error {e.error}")
        print(f"{mode}: {len(resources)} resources listed, transcript read, unknown id refused",
              flush=True)

        # Prompts.
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        check({"delegate", "running"} <= set(prompts), f"{mode}: prompts {sorted(prompts)}")
        got = await client.get_prompt("delegate", {"job": "List the TODO comments in src"})
        body = "\n".join(getattr(m.content, "text", "") for m in got.messages)
        check("List the TODO comments in src" in body and "opencode_start" in body,
              f"{mode}: delegate prompt {body[:300]}")
        got = await client.get_prompt("running")
        check(len(got.messages) >= 1, f"{mode}: running prompt {got}")
        print(f"{mode}: prompts {sorted(prompts)} listed and got", flush=True)

        # Tools: every structuredContent against its outputSchema.
        validated = {}

        async def call(name, args):
            result = await client.call_tool(name, args)
            check(not result.is_error, f"{mode}: {name} {args}: {result.content}")
            check(result.content and result.content[0].type == "text",
                  f"{mode}: {name} text first: {result.content}")
            if name in STRUCTURED:
                data = result.structured_content
                check(isinstance(data, dict), f"{mode}: {name} {args}: structuredContent {data!r}")
                errors = sorted(
                    jsonschema.Draft202012Validator(tools[name].output_schema).iter_errors(data),
                    key=str,
                )
                check(not errors, f"{mode}: {name} {args}: {[e.message for e in errors][:3]}")
                validated[name] = validated.get(name, 0) + 1
            return result

        started = await call("opencode_start",
                             {"tier": "easy", "prompt": "Say hello", "cwd": "demo", "wait_s": 30})
        first_line = started.content[0].text.splitlines()[0]
        check(" finished within wait_s" in first_line, f"{mode}: start {first_line}")
        task = first_line.split()[1]
        links = [c for c in started.content if c.type == "resource_link"]
        check(len(links) == 1 and str(links[0].uri).startswith("opencode://session/ses_"),
              f"{mode}: start links its session: {started.content}")
        status = await call("opencode_status", {"id": task})
        check(status.structured_content["state"] == "succeeded"
              and status.structured_content["id"] == int(task), f"{mode}: status {status.structured_content}")
        # (The fake opencode writes no store, so its session is not read here; the transcript
        # read above is a real opencode session.)
        result = await call("opencode_result", {"id": task})
        check(result.structured_content["task"]["session_id"] is not None, f"{mode}: result")
        await call("opencode_wait", {"ids": [task, "999"], "timeout_s": 1})
        await call("opencode_list", {})
        await call("opencode_processes", {})
        usage = await call("opencode_usage", {"since_days": 1})
        check(usage.structured_content["totals"]["tasks"] >= 1, f"{mode}: usage {usage.structured_content}")
        policy = await call("opencode_policy", {})
        check(policy.structured_content["mode"] == "blueprint", f"{mode}: policy {policy.structured_content}")
        await call("opencode_policy", {"mode": "sensitive"})
        await call("opencode_sessions", {"limit": 20})
        await call("opencode_sessions", {"state": "failed"})
        await call("opencode_session_output", {"id": fixture, "mode": "last"})

        failed = await client.call_tool("opencode_status", {"id": "424242"})
        check(failed.is_error and failed.structured_content is None,
              f"{mode}: a failed call has no structuredContent: {failed}")
        check(set(validated) == STRUCTURED, f"{mode}: validated {validated}")
        print(f"{mode}: structuredContent validated {json.dumps(validated, sort_keys=True)}",
              flush=True)


async def main():
    for mode in ("legacy", "auto"):
        await run(mode)
    print("OK", flush=True)


asyncio.run(main())
