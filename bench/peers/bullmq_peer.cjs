// BullMQ: one Worker, concurrency 200, no-op async processor, jobs removed on completion.
// Same protocol as the Python peers (probe.py): `node bullmq_peer.cjs enqueue N [DUE]` or
// `node bullmq_peer.cjs worker`; progress goes to PEER_PROGRESS. Run with NODE_PATH set to
// bench/.peers/node/node_modules. Delayed jobs use the `delay` option (ms from now).
"use strict";
const fs = require("fs");
const { Queue, Worker } = require("bullmq");

const url = new URL(process.env.PEER_REDIS_URL || "redis://127.0.0.1:6379/15");
const connection = {
  host: url.hostname, port: Number(url.port || 6379),
  db: Number(url.pathname.slice(1) || 0), maxRetriesPerRequest: null,
};
const jobs = Number(process.env.PEER_JOBS || 0);
const every = Math.max(1, Math.floor(jobs / (process.env.PEER_MODE === "delayed" ? 10 : 50)));
let count = 0, tFirst = 0, cpuFirst = 0;
const lags = [];

function cpuS() { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; }

function hit(due) {
  const now = Date.now() / 1000;
  if (count === 0) { tFirst = now; cpuFirst = cpuS(); }
  count += 1;
  if (due) lags.push((now - due) * 1000);
  if ((count % every === 0 || count === jobs) && process.env.PEER_PROGRESS) {
    const tmp = process.env.PEER_PROGRESS + ".tmp";
    fs.writeFileSync(tmp, JSON.stringify({ count, t_first: tFirst, t_last: now,
      cpu_s: cpuS() - cpuFirst, pid: process.pid, lags_ms: lags }));
    fs.renameSync(tmp, process.env.PEER_PROGRESS);
  }
}

async function enqueue(n, due) {
  const queue = new Queue("bench", { connection });
  for (let i = 0; i < n; i += 1000) {
    const delay = due ? Math.max(0, Math.round(due * 1000 - Date.now())) : undefined;
    const batch = Array.from({ length: Math.min(1000, n - i) }, () => ({
      name: "noop", data: { due: due || null },
      opts: { delay, removeOnComplete: true, removeOnFail: true } }));
    await queue.addBulk(batch);
  }
  await queue.close();
}

function worker() {
  const w = new Worker("bench", async (job) => { hit(job.data.due); },
    { connection, concurrency: 200 });
  const stop = async () => { await w.close(); process.exit(0); };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

const [cmd, n, due] = process.argv.slice(2);
if (cmd === "enqueue") {
  enqueue(Number(n), due ? Number(due) : null).then(() => process.exit(0));
} else if (cmd === "worker") {
  worker();
} else {
  console.error(`unknown command ${cmd}`);
  process.exit(2);
}
