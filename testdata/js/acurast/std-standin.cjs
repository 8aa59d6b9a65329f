// Test stand-in for the Acurast processor's _STD_ globals, for running the phonellm phone entrypoint under
// plain Node:   node --require ./std-standin.cjs index.js
//
// It implements only what the entrypoint uses, with the shapes of acurast.md §3 (shared reference):
//   _STD_.env                       from PHONELLM_STD_ENV (a JSON object of name -> value)
//   _STD_.job.storageDir            PHONELLM_STD_STORAGE (created if missing)
//   _STD_.job.getId(), .getSlot(), _STD_.device.getAddress(), _STD_.app_info.version
//   _STD_.llama.server.start(argv, onClose, onError)
//                                   spawns PHONELLM_STD_LLAMA_CMD (whitespace-separated command prefix, e.g.
//                                   "/path/phonellm serve") or, by default, `node fake-llama-server.cjs`, with
//                                   the llama-server arguments appended; onClose on exit, onError on spawn failure
//                                   With PHONELLM_STD_LLAMA_DIALECT=phonellm-serve the llama-server flags are
//                                   translated for `phonellm serve`: --model M -> positional M, --ctx-size T
//                                   -> --ctx T/parallel, --batch-size -> --batch, --flash-attn on ->
//                                   --flash-attn, --alias -> --alias, --cache-type-k T -> --kv-type T;
//                                   --ubatch-size, --cache-type-v and llama.cpp-only memory flags
//                                   (--cache-ram, --ctx-checkpoints) are dropped
//   _STD_.llama.server.stop()       kills it (SIGTERM, then SIGKILL) and resolves when it has exited
//   _STD_.tunnel.start(spec, ok, err)
//                                   a TCP relay on a free loopback port forwarding to spec.localAddr; checks the
//                                   spec's shape (serverAddrs, domainSuffix, primaryKey Secp256r1 PKCS#8 base64);
//                                   ok({url:"http://127.0.0.1:<port>", clientId})
//   _STD_.tunnel.stop(), .status()
// Events for the test harness are printed as single lines: "@@std <json>".
'use strict';

const { spawn } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const net = require('net');
const path = require('path');

const emit = (ev) => process.stdout.write('@@std ' + JSON.stringify(ev) + '\n');
const storageDir = process.env.PHONELLM_STD_STORAGE || path.join(process.cwd(), 'storage');
fs.mkdirSync(storageDir, { recursive: true });

let child = null;
let exited = null;

// toPhonellmServe maps llama-server's command line to `phonellm serve`'s flags.
function toPhonellmServe(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i += 2) o[argv[i]] = argv[i + 1];
  const parallel = Number(o['--parallel'] || 1);
  const out = [];
  if (o['--ctx-size']) out.push('--ctx', String(Math.floor(Number(o['--ctx-size']) / parallel)));
  out.push('--parallel', String(parallel));
  if (o['--threads']) out.push('--threads', o['--threads']);
  if (o['--batch-size']) out.push('--batch', o['--batch-size']);
  if (o['--flash-attn'] === 'on') out.push('--flash-attn');
  if (o['--alias']) out.push('--alias', o['--alias']);
  if (o['--cache-type-k']) out.push('--kv-type', o['--cache-type-k']);
  out.push('--host', o['--host'] || '127.0.0.1', '--port', o['--port'] || '8080');
  out.push(o['--model']);
  return out;
}

function startLlama(argv, onClose, onError) {
  if (!Array.isArray(argv) || argv.some((a) => typeof a !== 'string')) throw new TypeError('llama.server.start: argv must be an array of strings');
  if (child) throw new Error('llama.server.start: a server is already running');
  const prefix = (process.env.PHONELLM_STD_LLAMA_CMD || '').split(/\s+/).filter(Boolean);
  const cmd = prefix.length ? prefix : [process.execPath, path.join(__dirname, 'fake-llama-server.cjs')];
  const args = process.env.PHONELLM_STD_LLAMA_DIALECT === 'phonellm-serve' ? toPhonellmServe(argv) : argv;
  const p = spawn(cmd[0], cmd.slice(1).concat(args), { stdio: ['ignore', 'inherit', 'inherit'] });
  child = p;
  exited = new Promise((resolve) => p.on('exit', resolve));
  emit({ event: 'llama.start', pid: p.pid, argv });
  p.on('error', (e) => {
    if (child === p) child = null;
    emit({ event: 'llama.error', message: e.message });
    onError && onError(e);
  });
  p.on('exit', (code, signal) => {
    if (child === p) child = null;
    emit({ event: 'llama.exit', pid: p.pid, code, signal });
    onClose && onClose(code);
  });
}

async function stopLlama() {
  const p = child;
  if (!p) return;
  const done = exited;
  p.kill('SIGTERM');
  const t = setTimeout(() => p.kill('SIGKILL'), 3000);
  await done;
  clearTimeout(t);
}

let tunnel = null;
let tunnelState = -1;

function startTunnel(spec, ok, fail) {
  try {
    if (!spec || !Array.isArray(spec.serverAddrs) || spec.serverAddrs.length === 0) throw new Error('tunnel: serverAddrs missing');
    if (typeof spec.domainSuffix !== 'string' || !spec.domainSuffix) throw new Error('tunnel: domainSuffix missing');
    if (!spec.primaryKey || spec.primaryKey.algorithm !== 'Secp256r1') throw new Error('tunnel: primaryKey.algorithm must be Secp256r1');
    const key = crypto.createPrivateKey({ key: Buffer.from(spec.primaryKey.bytes, 'base64'), format: 'der', type: 'pkcs8' });
    if (key.asymmetricKeyDetails.namedCurve !== 'prime256v1') throw new Error('tunnel: key is not P-256');
    const jwk = crypto.createPublicKey(key).export({ format: 'jwk' });
    const x = Buffer.from(jwk.x, 'base64url');
    const y = Buffer.from(jwk.y, 'base64url');
    const clientId = crypto.createHash('sha256').update(Buffer.concat([Buffer.from([y[31] & 1 ? 3 : 2]), x])).digest().subarray(0, 8).toString('hex');
    const i = spec.localAddr.lastIndexOf(':');
    const host = spec.localAddr.slice(0, i);
    const port = Number(spec.localAddr.slice(i + 1));
    tunnelState = 0;
    tunnel = net.createServer((c) => {
      const u = net.connect(port, host);
      c.pipe(u).pipe(c);
      c.on('error', () => u.destroy());
      u.on('error', () => c.destroy());
    });
    tunnel.listen(0, '127.0.0.1', () => {
      tunnelState = 1;
      const url = 'http://127.0.0.1:' + tunnel.address().port;
      emit({ event: 'tunnel', url, clientId, localAddr: spec.localAddr, domainSuffix: spec.domainSuffix });
      ok && ok({ url, clientId });
    });
  } catch (e) {
    tunnelState = 3;
    fail && fail(e);
  }
}

let env = {};
if (process.env.PHONELLM_STD_ENV) env = JSON.parse(process.env.PHONELLM_STD_ENV);

globalThis._STD_ = {
  env,
  app_info: { version: 'standin' },
  device: { getAddress: () => '5StandInProcessorAddress', getPublicKey: () => '' },
  job: {
    storageDir,
    getId: () => ({ origin: { kind: 'Acurast', source: '5StandInOwner' }, id: 1 }),
    getSlot: () => 0,
  },
  llama: { server: { start: startLlama, stop: stopLlama } },
  tunnel: {
    start: startTunnel,
    stop: () => {
      if (tunnel) tunnel.close();
      tunnelState = 2;
    },
    status: () => tunnelState,
  },
};

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    if (child) child.kill('SIGKILL');
    process.exit(0);
  });
}
process.on('exit', () => child && child.kill('SIGKILL'));
