// run_agent.mjs URL THREAD [FORWARDED_PROPS_JSON]
// Runs one agent through the gateway with the real @ag-ui/client HttpAgent and
// prints, as JSON Lines on stdout: every event HttpAgent delivered
// ({"event": TYPE}), then {"done": true, "messages": [...]} with the agent's
// messages after the run. Exits 1 with {"error": "..."} when the run fails.
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, props] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
try {
  const { newMessages } = await agent.runAgent(
    { forwardedProps: props ? JSON.parse(props) : {} },
    { onEvent: ({ event }) => out({ event: event.type }) },
  );
  out({ done: true, newMessages, messages: agent.messages });
} catch (e) {
  out({ error: String(e && e.message ? e.message : e) });
  process.exit(1);
}
