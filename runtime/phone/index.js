// phonellm phone entrypoint: runs inside Acurast's Node.js runtime (NodeJSWithBundle) with the _STD_ globals.
//
// 1. starts the Acurast tunnel in front of a small local HTTP server (health and status answer at once);
// 2. downloads the model into _STD_.job.storageDir with resume (HTTP Range) and checks size + sha256;
// 3. starts llama.cpp through _STD_.llama.server.start(argv, onClose, onError), trying each candidate
//    thread/batch setting on a fixed request and keeping the fastest;
// 4. warms the prompt cache: each of the deployment's shared prefixes (config.json "warm", the rubrics) is sent
//    once as a system message before /health says ready, so the first real request that shares one is a hit;
// 5. proxies /v1/* to llama-server after checking "Authorization: Bearer <key>" (constant-time compare), and
//    counts what llama-server reports about its prompt cache (/status "cache");
// 6. restarts llama-server when it exits or stops answering /health, and warms it again.
//
// Configuration comes from config.json next to this file (written by phonellm's bundle builder); secrets
// (API key, Hub token, tunnel key) only from _STD_.env, by the names config.json gives. Nothing here logs a
// secret. Plain Node (>= 18) modules only: no dependencies.
'use strict';

const fs = require('fs');
const path = require('path');
const http = require('http');
const https = require('https');
const crypto = require('crypto');

const STD = globalThis._STD_;
const log = (...a) => console.log('phonellm:', ...a);

function loadConfig() {
  const candidates = [path.join(__dirname, 'config.json'), path.join(process.cwd(), 'config.json')];
  for (const p of candidates) {
    if (fs.existsSync(p)) return checkConfig(JSON.parse(fs.readFileSync(p, 'utf8')));
  }
  throw new Error('config.json not found next to the entrypoint');
}

// plainFileName is the rule for every name this script joins to a folder, the same as pipeline/deploy's
// ValidFileName: letters, digits, '.', '_' and '-', starting with a letter or digit (never ".", ".." or a
// hidden file), no "..", at most 200 bytes — so no separator can lead out of the job's storage folder.
const plainFileName = (s) => typeof s === 'string' && /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/.test(s) && !s.includes('..');

// checkConfig refuses a config.json whose values would be used as paths or numbers without being what the
// bundle builder writes (phonellm validates it too; this script does not trust that).
function checkConfig(c) {
  const bad = (msg) => {
    throw new Error('config.json: ' + msg);
  };
  if (!c || typeof c !== 'object') bad('not a JSON object');
  const m = c.model;
  if (!m || typeof m !== 'object') bad('no model');
  if (typeof m.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(m.sha256)) bad('model.sha256 is not 64 lowercase hex digits');
  if (!Number.isSafeInteger(m.size) || m.size <= 0) bad('model.size is not a positive integer');
  if (typeof m.url !== 'string' || !/^https?:\/\//.test(m.url)) bad('model.url is not an http(s) URL');
  if (m.file !== undefined && m.file !== '' && !plainFileName(m.file)) {
    bad(`model.file ${JSON.stringify(m.file)} is not a plain file name (letters, digits, '.', '_', '-'; no separators or "..")`);
  }
  if (!Number.isSafeInteger(c.ctx) || c.ctx <= 0 || !Number.isSafeInteger(c.slots) || c.slots <= 0) bad('ctx and slots must be positive integers');
  return c;
}

let cfg;
try {
  cfg = loadConfig();
} catch (e) {
  // Without a usable config there is nothing to serve; one line for the job's log, and a failed exit.
  console.error('phonellm: fatal:', e.message);
  process.exit(1);
}
const env = (STD && STD.env) || {};
const secret = (name) => (name && typeof env[name] === 'string' && env[name] !== '' ? env[name] : undefined);
const apiKey = secret(cfg.api_key_env);
const hfToken = secret(cfg.hf_token_env);
const llamaAddr = cfg.llama_addr || '127.0.0.1:8080';
const listenAddr = cfg.listen || '127.0.0.1:8081';
const started = Date.now();

const status = {
  phonellm: cfg.phonellm_version || 'dev',
  state: 'starting',
  model: { id: cfg.model.id || '', sha256: cfg.model.sha256, size: cfg.model.size, verified: false },
  download: { bytes: 0, total: cfg.model.size, resumed_from: 0 },
  ctx: cfg.ctx,
  slots: cfg.slots,
  settings: null,
  tok_s: 0,
  prompt_tok_s: 0,
  bench: [],
  tuning: '',
  warm: [],
  cache: { requests: 0, hits: 0, prompt_tokens: 0, cached_tokens: 0, hit_rate: 0 },
  restarts: 0,
  tunnel: null,
  error: '',
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const splitAddr = (a) => {
  const i = a.lastIndexOf(':');
  return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
};

// ---- download -------------------------------------------------------------------------------------------

function sha256File(p) {
  return new Promise((resolve, reject) => {
    const h = crypto.createHash('sha256');
    fs.createReadStream(p)
      .on('data', (d) => h.update(d))
      .on('error', reject)
      .on('end', () => resolve(h.digest('hex')));
  });
}

// request follows redirects itself so the Hub token is sent only to the host it belongs to.
function request(url, headers, token, redirects = 10) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const h = Object.assign({}, headers);
    if (token) h.authorization = 'Bearer ' + token;
    const mod = u.protocol === 'https:' ? https : http;
    const req = mod.get(u, { headers: h, timeout: 60000 }, (res) => {
      if ([301, 302, 303, 307, 308].includes(res.statusCode) && res.headers.location) {
        res.resume();
        if (redirects <= 0) return reject(new Error('too many redirects'));
        const next = new URL(res.headers.location, u);
        const keep = next.origin === u.origin ? token : undefined; // never forward the token to another host
        return resolve(request(next.toString(), headers, keep, redirects - 1));
      }
      resolve(res);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

// downloadOnce appends the missing bytes of the model to part; it returns when part is complete or throws.
async function downloadOnce(url, part, size) {
  let have = fs.existsSync(part) ? fs.statSync(part).size : 0;
  if (have > size) {
    fs.truncateSync(part, 0);
    have = 0;
  }
  if (have === size) return;
  status.download.resumed_from = have;
  const res = await request(url, have > 0 ? { range: `bytes=${have}-` } : {}, hfToken);
  if (res.statusCode === 416) {
    res.resume();
    fs.truncateSync(part, 0);
    throw new Error('range not satisfiable; restarting from zero');
  }
  if (res.statusCode !== 200 && res.statusCode !== 206) {
    res.resume();
    const err = new Error(`download: HTTP ${res.statusCode}`);
    err.fatal = res.statusCode >= 400 && res.statusCode < 500 && res.statusCode !== 408 && res.statusCode !== 429;
    throw err;
  }
  let start = 0;
  if (res.statusCode === 206) {
    const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.headers['content-range'] || '');
    if (!m || Number(m[1]) !== have) {
      res.resume();
      throw new Error(`download: bad Content-Range ${res.headers['content-range']} for offset ${have}`);
    }
    start = have;
  } // a 200 to a Range request means the server ignored it: start again from zero.
  const linked = Number(res.headers['x-linked-size'] || res.headers['content-length'] || 0);
  if (res.statusCode === 200 && linked && linked !== size) {
    res.resume();
    const err = new Error(`download: server says ${linked} bytes, config says ${size}`);
    err.fatal = true;
    throw err;
  }
  status.download.bytes = start;
  await new Promise((resolve, reject) => {
    const out = fs.createWriteStream(part, { flags: start > 0 ? 'r+' : 'w', start });
    let written = start;
    res.on('data', (d) => {
      written += d.length;
      status.download.bytes = written;
      if (written > size) res.destroy(new Error('download: more bytes than the model size'));
    });
    res.on('error', (e) => out.destroy(e));
    out.on('error', reject);
    out.on('finish', () => (written === size ? resolve() : reject(new Error(`download: got ${written} of ${size} bytes`))));
    res.on('aborted', () => out.destroy(new Error('download: connection closed early')));
    res.pipe(out);
  });
}

async function fetchModel() {
  const dir = (STD && STD.job && STD.job.storageDir) || process.cwd();
  fs.mkdirSync(dir, { recursive: true });
  const name = cfg.model.file || `model-${cfg.model.sha256.slice(0, 16)}.gguf`;
  const file = path.join(dir, name);
  // checkConfig vetted the name; check again where it becomes a path, so nothing is ever written outside dir.
  if (!plainFileName(name) || path.dirname(path.resolve(file)) !== path.resolve(dir)) {
    throw Object.assign(new Error(`model file ${JSON.stringify(name)} would be outside the storage folder`), { fatal: true });
  }
  const marker = file + '.ok';
  const want = `${cfg.model.sha256} ${cfg.model.size}`;
  if (fs.existsSync(file)) {
    const st = fs.statSync(file);
    const ok = fs.existsSync(marker) && fs.readFileSync(marker, 'utf8').trim() === `${want} ${st.mtimeMs}`;
    if (st.size === cfg.model.size && (ok || (await sha256File(file)) === cfg.model.sha256)) {
      if (!ok) fs.writeFileSync(marker, `${want} ${st.mtimeMs}\n`);
      status.download.bytes = st.size;
      status.model.verified = true;
      log('model already present and verified:', path.basename(file));
      return file;
    }
    fs.rmSync(file, { force: true });
  }
  const part = file + '.part';
  status.state = 'downloading';
  for (let attempt = 1, full = 0; ; attempt++) {
    try {
      await downloadOnce(cfg.model.url, part, cfg.model.size);
      const sum = await sha256File(part);
      if (sum !== cfg.model.sha256) {
        fs.rmSync(part, { force: true });
        if (++full >= 2) throw Object.assign(new Error(`model sha256 ${sum} != ${cfg.model.sha256}`), { fatal: true });
        throw new Error(`model sha256 mismatch (${sum}); downloading again`);
      }
      fs.renameSync(part, file);
      fs.writeFileSync(marker, `${want} ${fs.statSync(file).mtimeMs}\n`);
      status.model.verified = true;
      log('model downloaded and verified:', path.basename(file), cfg.model.size, 'bytes');
      return file;
    } catch (e) {
      if (e.fatal || attempt >= (cfg.download_attempts || 12)) throw e;
      const wait = Math.min(30000, 500 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
      log(`download attempt ${attempt} failed (${e.message}); retrying in ${Math.round(wait)} ms`);
      await sleep(wait);
    }
  }
}

// ---- llama-server ---------------------------------------------------------------------------------------

function llamaCall(method, p, body, timeoutMs) {
  return new Promise((resolve, reject) => {
    const { host, port } = splitAddr(llamaAddr);
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = http.request(
      { host, port, method, path: p, timeout: timeoutMs, headers: data ? { 'content-type': 'application/json', 'content-length': data.length } : {} },
      (res) => {
        const chunks = [];
        res.on('data', (d) => chunks.push(d));
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(data);
  });
}

async function llamaHealthy() {
  try {
    const r = await llamaCall('GET', '/health', undefined, 5000);
    return r.status === 200;
  } catch {
    return false;
  }
}

function argsFor(model, s) {
  const a = ['--model', model, '--ctx-size', String(cfg.ctx * cfg.slots), '--parallel', String(cfg.slots), '--threads', String(s.threads)];
  if (s.batch) a.push('--batch-size', String(s.batch));
  if (s.ubatch) a.push('--ubatch-size', String(s.ubatch));
  // A quantized V cache needs flash attention in llama.cpp.
  if (s.flash_attn || (cfg.kv_type && cfg.kv_type !== 'f16')) a.push('--flash-attn', 'on');
  if (cfg.model.id) a.push('--alias', cfg.model.id);
  if (llamaAddr !== '127.0.0.1:8080') {
    const { host, port } = splitAddr(llamaAddr);
    a.push('--host', host, '--port', String(port));
  }
  return a.concat(cfg.extra_args || []);
}

let generation = 0; // bumps on every intentional start/stop so stale onClose callbacks are ignored
let current = null; // settings llama-server runs with
let restartTimer = null;
let supervising = false; // restart on exit only once tuning is over

function canStop() {
  return !!(STD.llama.server && typeof STD.llama.server.stop === 'function');
}

async function stopServer() {
  generation++;
  if (canStop()) {
    await STD.llama.server.stop();
    for (let i = 0; i < 100 && (await llamaHealthy()); i++) await sleep(100);
  }
}

async function startServer(model, s) {
  const gen = ++generation;
  current = s;
  const onExit = (why) => {
    if (gen !== generation) return;
    generation++;
    log('llama-server stopped:', why);
    if (supervising) scheduleRestart(model);
  };
  STD.llama.server.start(argsFor(model, s), () => onExit('closed'), (e) => onExit('error ' + (e && e.message ? e.message : e)));
  const deadline = Date.now() + (cfg.start_timeout_ms || 600000);
  while (Date.now() < deadline) {
    if (gen !== generation) throw new Error('llama-server exited while loading');
    if (await llamaHealthy()) return;
    await sleep(250);
  }
  throw new Error('llama-server did not become healthy in time');
}

async function benchOnce(timeoutMs) {
  const b = cfg.bench || {};
  const body = {
    model: cfg.model.id || 'model',
    messages: [{ role: 'user', content: b.prompt || 'Count from one to twenty in words.' }],
    max_tokens: b.max_tokens || 32,
    temperature: 0,
    stream: false,
  };
  const t0 = process.hrtime.bigint();
  const r = await llamaCall('POST', '/v1/chat/completions', body, timeoutMs);
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  if (r.status !== 200) throw new Error(`bench request: HTTP ${r.status}`);
  const j = JSON.parse(r.body);
  const t = j.timings || {};
  const n = (j.usage && j.usage.completion_tokens) || 0;
  // llama-server's own timings (prompt_ms + predicted_ms) exclude HTTP and scheduling noise; wall clock otherwise.
  const served = typeof t.prompt_ms === 'number' && typeof t.predicted_ms === 'number' ? (t.prompt_ms + t.predicted_ms) / 1000 : 0;
  return { seconds: served || secs, wall_s: secs, tok_s: t.predicted_per_second || (n && secs ? n / secs : 0), prompt_tok_s: t.prompt_per_second || 0 };
}

// tune starts llama-server with each candidate, times one fixed request, and leaves the fastest running.
// The first candidate that answers is the calibration: a later one gets tune_slower (4) times the fastest
// request so far, plus a grace, and is abandoned past that. It cannot win, and an oversubscribed setting can
// spin in its thread barriers for minutes (40.9 s where one thread took 0.06 s on a busy 2-core machine).
async function tune(model) {
  const cands = cfg.candidates && cfg.candidates.length ? cfg.candidates : [{ threads: 4 }];
  const tryAll = cands.length > 1 && canStop();
  const slower = cfg.tune_slower || 4;
  const graceMs = cfg.tune_grace_ms || 2000;
  status.tuning = cands.length === 1 ? 'one candidate' : tryAll ? 'benchmarking' : 'skipped: _STD_.llama.server.stop is not available';
  let best = null;
  for (let i = 0; i < (tryAll ? cands.length : 1); i++) {
    const s = cands[i];
    status.state = 'tuning';
    const limit = best ? Math.round(slower * best.r.wall_s * 1000) + graceMs : cfg.bench_timeout_ms || 600000;
    try {
      if (i > 0) await stopServer();
      await startServer(model, s);
      const r = await benchOnce(limit);
      status.bench.push(Object.assign({ settings: s }, r));
      log(`candidate ${JSON.stringify(s)}: ${r.seconds.toFixed(3)} s, ${r.tok_s.toFixed(1)} tok/s`);
      if (!best || r.seconds < best.r.seconds) best = { s, r };
    } catch (e) {
      if (best && e.message === 'timeout') {
        const why = `abandoned: no answer within ${limit} ms, ${slower}× the fastest candidate's ${best.r.wall_s.toFixed(3)} s`;
        status.bench.push({ settings: s, error: why, abandoned: true });
        log(`candidate ${JSON.stringify(s)} ${why}`);
        continue;
      }
      status.bench.push({ settings: s, error: e.message });
      log(`candidate ${JSON.stringify(s)} failed: ${e.message}`);
    }
  }
  if (!best) throw new Error('no candidate setting started');
  if (current !== best.s) {
    await stopServer();
    await startServer(model, best.s);
  }
  status.settings = best.s;
  status.tok_s = best.r.tok_s;
  status.prompt_tok_s = best.r.prompt_tok_s;
  if (tryAll) status.tuning = `kept ${cands.indexOf(best.s) + 1} of ${cands.length}`;
}

// WARM_USER is the user message of a warm-up request (phonellm serve --warm sends the same): short, so that the
// evaluation is almost all the shared prefix.
const WARM_USER = 'Hello.';

// warm sends each shared prefix once as a system message, generating one token, so that llama-server holds it
// (in a slot, and in its host-memory prompt cache when --cache-ram has room) and, for hybrid models, keeps a
// checkpoint where the user message starts. A failure is recorded, not fatal: the phone still serves.
async function warm() {
  const texts = Array.isArray(cfg.warm) ? cfg.warm : [];
  status.warm = [];
  for (let i = 0; i < texts.length; i++) {
    const body = {
      model: cfg.model.id || 'model',
      messages: [{ role: 'system', content: texts[i] }, { role: 'user', content: WARM_USER }],
      max_tokens: 1,
      temperature: 0,
      cache_prompt: true,
      stream: false,
    };
    const t0 = process.hrtime.bigint();
    try {
      const r = await llamaCall('POST', '/v1/chat/completions', body, cfg.bench_timeout_ms || 600000);
      const secs = Number(process.hrtime.bigint() - t0) / 1e9;
      if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
      const u = usageOf(JSON.parse(r.body));
      status.warm.push({ prefix: i, tokens: u.prompt, cached: u.cached, seconds: secs });
      log(`warm-up ${i + 1}/${texts.length}: ${u.prompt} tokens in ${secs.toFixed(2)} s`);
    } catch (e) {
      status.warm.push({ prefix: i, error: e.message });
      log(`warm-up ${i + 1}/${texts.length} failed: ${e.message}`);
    }
  }
}

// usageOf reads what an answer reports about its prompt: OpenAI's usage (prompt_tokens_details.cached_tokens)
// or llama-server's timings (prompt_n evaluated, cache_n reused).
function usageOf(j) {
  const u = (j && j.usage) || {};
  const t = (j && j.timings) || {};
  let prompt = typeof u.prompt_tokens === 'number' ? u.prompt_tokens : -1;
  let cached = u.prompt_tokens_details && typeof u.prompt_tokens_details.cached_tokens === 'number' ? u.prompt_tokens_details.cached_tokens : -1;
  if (typeof t.cache_n === 'number' && typeof t.prompt_n === 'number') {
    if (prompt < 0) prompt = t.prompt_n + t.cache_n;
    if (cached < 0) cached = t.cache_n;
  }
  return { prompt, cached };
}

// countUsage adds one answer's prompt report to status.cache (a hit reused at least half of its prompt).
function countUsage(u) {
  if (u.prompt <= 0 || u.cached < 0) return;
  const c = status.cache;
  c.requests++;
  if (2 * u.cached >= u.prompt) c.hits++;
  c.prompt_tokens += u.prompt;
  c.cached_tokens += Math.min(u.cached, u.prompt);
  c.hit_rate = c.cached_tokens / c.prompt_tokens;
}

// usageTap watches an answer passing through for its prompt report: a JSON body (kept up to 1 MiB) or the data
// lines of an event stream that carry usage or timings.
function usageTap(contentType) {
  const sse = /text\/event-stream/.test(contentType || '');
  const json = /application\/json/.test(contentType || '');
  let buf = '';
  let over = false;
  let last = null;
  return {
    data(d) {
      if (!sse && !json) return;
      if (over) return;
      buf += d.toString('utf8');
      if (sse) {
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).replace(/\r$/, '');
          buf = buf.slice(i + 1);
          if (line.startsWith('data:') && (line.includes('"usage"') || line.includes('"timings"'))) {
            try {
              const u = usageOf(JSON.parse(line.slice(5)));
              if (u.prompt > 0) last = u;
            } catch {}
          }
        }
      }
      if (buf.length > 1 << 20) over = true;
    },
    end() {
      if (json && !over) {
        try {
          last = usageOf(JSON.parse(buf));
        } catch {}
      }
      if (last) countUsage(last);
    },
  };
}

let restartDelay = 1000;
function scheduleRestart(model) {
  if (restartTimer) return;
  status.state = 'restarting';
  status.restarts++;
  const wait = restartDelay;
  restartDelay = Math.min(restartDelay * 2, 60000);
  restartTimer = setTimeout(async () => {
    restartTimer = null;
    try {
      if (canStop()) await stopServer();
      await startServer(model, current);
      await warm();
      status.state = 'ready';
      restartDelay = 1000;
      log('llama-server restarted');
    } catch (e) {
      log('restart failed:', e.message);
      scheduleRestart(model);
    }
  }, wait);
}

function watchdog(model) {
  let misses = 0;
  setInterval(async () => {
    if (status.state !== 'ready') return;
    if (await llamaHealthy()) {
      misses = 0;
      return;
    }
    if (++misses >= 3) {
      misses = 0;
      log('llama-server stopped answering /health');
      generation++;
      scheduleRestart(model);
    }
  }, cfg.watchdog_ms || 10000).unref();
}

// ---- public HTTP server ---------------------------------------------------------------------------------

const digest = (s) => crypto.createHash('sha256').update(s, 'utf8').digest();
const keyDigest = apiKey ? digest(apiKey) : null;

function authorized(req) {
  if (!cfg.api_key_env) return true; // configured without a key (local tests only)
  if (!keyDigest) return false; // a key is required but was not delivered: fail closed
  const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization || '');
  return !!m && crypto.timingSafeEqual(digest(m[1].trim()), keyDigest);
}

function sendJSON(res, code, obj, extra) {
  const b = JSON.stringify(obj);
  res.writeHead(code, Object.assign({ 'content-type': 'application/json', 'content-length': Buffer.byteLength(b) }, extra || {}));
  res.end(b);
}

const apiError = (res, code, type, message, extra) => sendJSON(res, code, { error: { message, type, code } }, extra);

function proxy(req, res) {
  const { host, port } = splitAddr(llamaAddr);
  const headers = Object.assign({}, req.headers);
  delete headers.authorization;
  delete headers.host;
  const up = http.request({ host, port, method: req.method, path: req.url, headers }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    if (ur.statusCode === 200) {
      const tap = usageTap(ur.headers['content-type']);
      ur.on('data', (d) => tap.data(d));
      ur.on('end', () => tap.end());
    }
    ur.pipe(res);
    ur.on('error', () => res.destroy());
  });
  up.on('error', (e) => {
    if (!res.headersSent) apiError(res, 502, 'upstream_error', 'llama-server: ' + e.message, { 'retry-after': '1' });
    else res.destroy();
  });
  req.on('aborted', () => up.destroy());
  req.pipe(up);
}

function handle(req, res) {
  const url = req.url.split('?')[0];
  if (url === '/health') {
    const ok = status.state === 'ready';
    return sendJSON(res, ok ? 200 : 503, { status: ok ? 'ok' : status.state, slots: cfg.slots });
  }
  if (url === '/status') {
    return sendJSON(res, 200, Object.assign({}, status, { uptime_s: Math.round((Date.now() - started) / 1000) }));
  }
  if (url.startsWith('/v1/')) {
    if (!authorized(req)) {
      return apiError(res, 401, 'invalid_request_error', keyDigest || !cfg.api_key_env ? 'invalid API key' : 'server has no API key configured', { 'www-authenticate': 'Bearer' });
    }
    if (status.state !== 'ready') return apiError(res, 503, 'unavailable', 'model is ' + status.state, { 'retry-after': '5' });
    return proxy(req, res);
  }
  apiError(res, 404, 'not_found', 'no route ' + url);
}

// ---- tunnel ---------------------------------------------------------------------------------------------

function tunnelKey() {
  const k = secret(cfg.tunnel_key_env);
  if (k) return k;
  const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  return privateKey.export({ type: 'pkcs8', format: 'der' }).toString('base64');
}

// clientId is the Acurast tunnel's client ID: the first 8 bytes of sha256(compressed P-256 public key), hex.
function clientId(pkcs8b64) {
  const key = crypto.createPrivateKey({ key: Buffer.from(pkcs8b64, 'base64'), format: 'der', type: 'pkcs8' });
  const jwk = crypto.createPublicKey(key).export({ format: 'jwk' });
  const x = Buffer.from(jwk.x, 'base64url');
  const y = Buffer.from(jwk.y, 'base64url');
  const comp = Buffer.concat([Buffer.from([y[y.length - 1] & 1 ? 3 : 2]), x]);
  return crypto.createHash('sha256').update(comp).digest().subarray(0, 8).toString('hex');
}

function startTunnel() {
  if (!STD.tunnel || typeof STD.tunnel.start !== 'function') {
    log('no _STD_.tunnel on this processor; serving on', listenAddr, 'only');
    return;
  }
  const t = cfg.tunnel || {};
  const key = tunnelKey();
  const id = clientId(key);
  const suffix = t.domain_suffix || 'acu.run';
  status.tunnel = { client_id: id, expected_url: `https://${id}.${suffix}`, url: '' };
  const spec = { serverAddrs: t.server_addrs || ['relay-1.mainnet.acurast.com:4433'], domainSuffix: suffix, localAddr: listenAddr, primaryKey: { algorithm: 'Secp256r1', bytes: key } };
  STD.tunnel.start(
    spec,
    (info) => {
      status.tunnel.url = (info && info.url) || status.tunnel.expected_url;
      log('tunnel up:', status.tunnel.url);
    },
    (e) => {
      status.tunnel.error = String(e && e.message ? e.message : e);
      log('tunnel error:', status.tunnel.error);
    },
  );
}

// ---- main -----------------------------------------------------------------------------------------------

async function main() {
  if (!STD || !STD.llama || !STD.llama.server) throw new Error('_STD_.llama.server is not available (not an Acurast processor?)');
  if (cfg.api_key_env && !apiKey) log(`warning: ${cfg.api_key_env} is not set; /v1 answers 401 until it is`);
  const { host, port } = splitAddr(listenAddr);
  const server = http.createServer(handle);
  await new Promise((r, j) => server.listen(port, host, r).on('error', j));
  log('listening on', listenAddr);
  startTunnel();
  const model = await fetchModel();
  status.state = 'loading';
  await tune(model);
  status.state = 'warming';
  await warm();
  status.state = 'ready';
  supervising = true;
  log(`ready: ${JSON.stringify(status.settings)}, ${status.tok_s.toFixed(1)} tok/s`);
  watchdog(model);
}

main().catch((e) => {
  status.state = 'failed';
  status.error = e.message;
  log('fatal:', e.message);
});
