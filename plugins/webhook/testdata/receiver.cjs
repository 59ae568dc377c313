// A receiver built the way the Standard Webhooks spec tells one to be, on
// the reference verifier (npm "standardwebhooks"): verify each request's
// signature, then deduplicate on webhook-id. It reads the requests a test
// captured, one JSON object {"headers": {...}, "body": "..."} per line on
// stdin, and prints one JSON line per request:
// {"webhook_id": ..., "verified": bool, "duplicate": bool, "events": [ids]}.
// Usage: node receiver.cjs <secret>   (NODE_PATH names the node_modules)
"use strict";
const { Webhook } = require("standardwebhooks");
const readline = require("readline");

const wh = new Webhook(process.argv[2]);
const seen = new Set();
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  if (!line.trim()) return;
  const req = JSON.parse(line);
  const out = { webhook_id: req.headers["webhook-id"], verified: false, duplicate: false, events: [] };
  try {
    const payload = wh.verify(req.body, req.headers);
    out.verified = true;
    if (seen.has(out.webhook_id)) {
      out.duplicate = true; // the spec: already processed, acknowledge and drop
    } else {
      seen.add(out.webhook_id);
      out.events = payload.events.map((e) => e.id);
    }
  } catch (err) {
    out.error = String(err && err.message ? err.message : err);
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
