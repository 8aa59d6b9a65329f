// A small stand-in for llama.cpp's llama-server, for tests of the phone entrypoint. It takes llama-server's
// command line, refuses what llama-server would refuse (missing or non-GGUF --model, bad numbers), answers
// /health (503 "Loading model" for PHONELLM_FAKE_LOAD_MS, then ok), /v1/models and /v1/chat/completions
// (plain and streamed) with llama-server's response shapes, including `timings`.
// Its speed depends on --threads: predicted_per_second = 100 - 10*|threads - PHONELLM_FAKE_BEST_THREADS|
// (default best 4), and it sleeps accordingly, so a tuner that keeps the fastest setting can be checked. At
// --threads PHONELLM_FAKE_STALL_THREADS it never answers a completion (an oversubscribed setting that spins).
'use strict';

const fs = require('fs');
const http = require('http');

const argv = process.argv.slice(2);
const opt = {};
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (!a.startsWith('-')) fail('unexpected argument ' + a);
  if (a === '--flash-attn') {
    opt[a] = argv[++i];
    continue;
  }
  if (i + 1 >= argv.length) fail('missing value for ' + a);
  opt[a] = argv[++i];
}
function fail(msg) {
  console.error('fake-llama-server: ' + msg);
  process.exit(1);
}
const num = (k, d) => {
  if (opt[k] === undefined) return d;
  const n = Number(opt[k]);
  if (!Number.isInteger(n) || n <= 0) fail(`${k} ${opt[k]}: not a positive integer`);
  return n;
};
const model = opt['--model'] || opt['-m'];
if (!model) fail('--model is required');
const fd = fs.openSync(model, 'r');
const magic = Buffer.alloc(4);
fs.readSync(fd, magic, 0, 4, 0);
fs.closeSync(fd);
if (magic.toString('latin1') !== 'GGUF') fail(model + ' is not a GGUF file');
const threads = num('--threads', 4);
const ctx = num('--ctx-size', 4096);
const parallel = num('--parallel', 1);
num('--batch-size', 2048);
num('--ubatch-size', 512);
const host = opt['--host'] || '127.0.0.1';
const port = num('--port', 8080);
const alias = opt['--alias'] || model.split('/').pop();
const best = Number(process.env.PHONELLM_FAKE_BEST_THREADS || 4);
const speed = Math.max(5, 100 - 10 * Math.abs(threads - best));
const readyAt = Date.now() + Number(process.env.PHONELLM_FAKE_LOAD_MS || 200);

const send = (res, code, obj) => {
  const b = JSON.stringify(obj);
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b) });
  res.end(b);
};

http
  .createServer((req, res) => {
    const ready = Date.now() >= readyAt;
    if (req.url === '/health') return ready ? send(res, 200, { status: 'ok' }) : send(res, 503, { error: { code: 503, message: 'Loading model', type: 'unavailable_error' } });
    if (!ready) return send(res, 503, { error: { code: 503, message: 'Loading model', type: 'unavailable_error' } });
    if (req.url === '/v1/models') return send(res, 200, { object: 'list', data: [{ id: alias, object: 'model', owned_by: 'llamacpp', meta: { n_ctx_train: ctx } }] });
    if (req.url === '/props') return send(res, 200, { total_slots: parallel, default_generation_settings: { n_ctx: ctx / parallel } });
    if (req.url !== '/v1/chat/completions' || req.method !== 'POST') return send(res, 404, { error: { code: 404, message: 'File Not Found', type: 'not_found_error' } });
    const chunks = [];
    req.on('data', (d) => chunks.push(d));
    req.on('end', () => {
      let body;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return send(res, 400, { error: { code: 400, message: 'invalid JSON', type: 'invalid_request_error' } });
      }
      if (!Array.isArray(body.messages) || body.messages.length === 0) return send(res, 400, { error: { code: 400, message: "'messages' is required", type: 'invalid_request_error' } });
      if (Number(process.env.PHONELLM_FAKE_STALL_THREADS || 0) === threads) return; // no answer, ever
      const last = String(body.messages[body.messages.length - 1].content);
      const words = ('RISK_LEVEL: 5 (' + last.slice(0, 40) + ')').split(' ');
      const n = Math.min(words.length, body.max_tokens || 16);
      const text = words.slice(0, n).join(' ');
      const promptN = last.split(/\s+/).length;
      const timings = { prompt_n: promptN, prompt_ms: (promptN / (speed * 5)) * 1000, prompt_per_second: speed * 5, predicted_n: n, predicted_ms: (n / speed) * 1000, predicted_per_second: speed };
      const usage = { prompt_tokens: promptN, completion_tokens: n, total_tokens: promptN + n };
      const id = 'chatcmpl-fake';
      const created = Math.floor(Date.now() / 1000);
      setTimeout(() => {
        if (!body.stream) {
          return send(res, 200, { id, object: 'chat.completion', created, model: alias, choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage, timings });
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const ev = (o) => res.write('data: ' + JSON.stringify(o) + '\n\n');
        ev({ id, object: 'chat.completion.chunk', created, model: alias, choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] });
        words.slice(0, n).forEach((w, i) => ev({ id, object: 'chat.completion.chunk', created, model: alias, choices: [{ index: 0, delta: { content: (i ? ' ' : '') + w } }] }));
        ev({ id, object: 'chat.completion.chunk', created, model: alias, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage, timings });
        res.end('data: [DONE]\n\n');
      }, Math.round((n / speed) * 1000));
    });
  })
  .listen(port, host, () => console.error(`fake-llama-server: threads=${threads} ctx=${ctx} parallel=${parallel} on ${host}:${port}`));
process.on('SIGTERM', () => process.exit(0));
