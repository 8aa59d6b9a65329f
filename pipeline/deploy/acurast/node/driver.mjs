// phonellm's driver for the official @acurast/sdk (pinned in package.json next to this file).
//
// Usage: node driver.mjs <op>   with one JSON request on stdin. Output on stdout, one line each:
//   @@event {json}    progress (deploy statuses)
//   @@result {json}   the answer (exit 0)
//   @@error {json}    {message} (exit 1)
// Secrets: the mnemonic is read from ACURAST_MNEMONIC (environment) only; per-replica secret values arrive on
// stdin. Neither is ever printed: events carry statuses, job IDs, hashes and addresses only.
//
// Ops:
//   version          installed package versions
//   validate         {configs:[AcurastProjectConfig]} -> SDK validateConfig on each
//   encode-deploy    {config, network} -> SDK convertConfigToJob, then AcurastMarketplace.deploy (43/11) call
//                    bytes encoded offline with @polkadot/types from the on-chain layouts (acurast.md §2.4)
//   env-encrypt      {processorPublicKey, curve, deployerPrivateKey?, vars:[{key,value}]} -> the SDK's
//                    JobEnvironmentService encryption, as it submits it: {publicKey, variables:[[keyHex, valueHex]]}
//   env-decrypt      {processorPrivateKey, deployerPublicKey, curve, variables} -> decrypted with the SDK's own
//                    processEncryptedHex + decrypt (the processor side)
//   tunnel-id        {key} -> Acurast tunnel client ID of a base64 PKCS#8 P-256 key (Node crypto)
//   estimate         {config, matcherUrl} -> matcher pricing advice (SDK fetchPricingAdvice)
//   pin              {file, endpoint} -> SDK uploadScript (Pinata API shape); key from ACURAST_IPFS_API_KEY
//   deploy           {rpc, ipfs:{endpoint}, replicas:[{config, envVars:[{key,value}]}], timeoutMs}
//                    -> for each replica: SDK deployProject (bundle already pinned: config.fileUrl = ipfs://…),
//                    waiting until its environment variables are set (or the timeout)
//   stop             {rpc, jobIds:[n]} -> Acurast.deregister(n) for each (signed with the mnemonic)
//   batch            {ops:[{op, req}]} -> several offline ops in one process
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const out = (kind, obj) =>
  process.stdout.write(`@@${kind} ` + JSON.stringify(obj, (_, v) => (typeof v === 'bigint' ? v.toString() : v && v._isBigNumber ? v.toFixed() : v)) + '\n');

function readStdin() {
  const b = fs.readFileSync(0, 'utf8');
  return b.trim() ? JSON.parse(b) : {};
}

const sdk = () => import('@acurast/sdk');
const chain = () => import('@acurast/sdk/chain');

// On-chain layouts (acurast.md §2.4, from acurast-substrate pallets/*/types.rs), under our own names so they
// cannot collide with @polkadot/types' built-in definitions.
const LAYOUTS = {
  PhJobModule: { _enum: ['DataEncryption', 'LLM', 'Shell'] },
  PhSchedule: { duration: 'u64', startTime: 'u64', endTime: 'u64', interval: 'u64', maxStartDelay: 'u64' },
  PhPlannedExecution: { source: 'AccountId32', startDelay: 'u64' },
  PhAssignmentStrategy: { _enum: { Single: 'Option<Vec<PhPlannedExecution>>', Competing: 'Null' } },
  PhVersion: { platform: 'u32', buildNumber: 'u32' },
  PhProcessorVersion: { _enum: { Min: 'Vec<PhVersion>' } },
  PhRuntime: { _enum: ['NodeJS', 'NodeJSWithBundle', 'Shell'] },
  PhJobRequirements: {
    assignmentStrategy: 'PhAssignmentStrategy',
    slots: 'u8',
    reward: 'u128',
    minReputation: 'Option<u128>',
    processorVersion: 'Option<PhProcessorVersion>',
    runtime: 'PhRuntime',
  },
  PhRegistrationExtra: { requirements: 'PhJobRequirements' },
  PhJobRegistration: {
    script: 'Bytes',
    allowedSources: 'Option<Vec<AccountId32>>',
    allowOnlyVerifiedSources: 'bool',
    schedule: 'PhSchedule',
    memory: 'u32',
    networkRequests: 'u32',
    storage: 'u32',
    requiredModules: 'Vec<PhJobModule>',
    extra: 'PhRegistrationExtra',
  },
  PhScriptMutability: { _enum: { Immutable: 'Null', Mutable: 'Option<AccountId32>' } },
  PhMultiOrigin: { _enum: { Acurast: 'AccountId32' } },
};

async function encodeDeploy(req) {
  const { TypeRegistry } = await import('@polkadot/types');
  const { u8aConcat, u8aToHex } = await import('@polkadot/util');
  const { convertConfigToJob, buildBenchmarkMetricTriples, hasBenchmarkFilters } = await chain();
  const registry = new TypeRegistry();
  registry.register(LAYOUTS);
  const config = req.config;
  const job = convertConfigToJob(config);
  const r = job.extra.requirements;
  const reg = registry.createType('PhJobRegistration', {
    script: '0x' + Buffer.from(job.script, 'utf8').toString('hex'),
    allowedSources: job.allowedSources ?? null,
    allowOnlyVerifiedSources: job.allowOnlyVerifiedSources,
    schedule: job.schedule,
    memory: job.memory,
    networkRequests: job.networkRequests,
    storage: job.storage,
    requiredModules: job.requiredModules ?? [],
    extra: {
      requirements: {
        assignmentStrategy:
          r.assignmentStrategy.variant === 'Single'
            ? { Single: r.assignmentStrategy.instantMatch ? r.assignmentStrategy.instantMatch.map((i) => ({ source: i.source, startDelay: i.startDelay })) : null }
            : { Competing: null },
        slots: r.slots,
        reward: String(r.reward),
        // The SDK sends None for a zero reputation (register-job.js: `minReputation ? Some : None`).
        minReputation: r.minReputation ? String(r.minReputation) : null,
        processorVersion: r.processorVersion ? { Min: r.processorVersion.min } : null,
        runtime: r.runtime,
      },
    },
  });
  const mutability = registry.createType('PhScriptMutability', job.mutability === 'Mutable' ? { Mutable: null } : { Immutable: null });
  const reuse = registry.createType('Option<(PhMultiOrigin, u128)>', job.reuseKeysFrom ? [{ Acurast: job.reuseKeysFrom[1] }, job.reuseKeysFrom[2]] : null);
  const triples = hasBenchmarkFilters(config) ? buildBenchmarkMetricTriples(req.network ?? config.network, config.benchmarkFilters) : [];
  const minMetrics = registry.createType('Option<Vec<(u8, u128, u128)>>', triples.map((t) => [t[0], t[1].toString(), t[2].toString()]));
  const call = u8aConcat(new Uint8Array([43, 11]), reg.toU8a(), mutability.toU8a(), reuse.toU8a(), minMetrics.toU8a());
  return { call: u8aToHex(call), job, minMetrics: triples.map((t) => t.map(String)) };
}

async function envService(privateKeyHex, curve) {
  const { JobEnvironmentService, InMemoryKeyStore } = await chain();
  const store = new InMemoryKeyStore();
  const svc = new JobEnvironmentService({ acurastService: null, keyStore: store });
  if (privateKeyHex) {
    const { ec } = require('elliptic');
    const kp = new ec(curve).keyFromPrivate(privateKeyHex, 'hex');
    svc.setPrivateKey(kp.getPrivate('hex'), curve);
    svc.setPublicKey(kp.getPublic(true, 'hex'), curve);
  }
  return svc;
}

async function envEncrypt(req) {
  const { getProcessorEncryptionKey } = await chain();
  const curve = req.curve || 'p256';
  // Key selection exactly as the SDK does it for a processor's StoredMatches entry.
  const field = curve === 'p256' ? 'SECP256r1Encryption' : 'SECP256k1Encryption';
  const key = getProcessorEncryptionKey({ assignment: { pubKeys: [{ SECP256r1: '0x' + '02'.repeat(33) }, { [field]: '0x' + req.processorPublicKey }] } });
  const svc = await envService(req.deployerPrivateKey, key.curve);
  const shared = await svc.generateSharedKey(key.publicKey, key.curve);
  const variables = req.vars.map((v) => {
    const e = svc.encrypt(v.value, shared);
    return [Buffer.from(v.key, 'utf8').toString('hex'), e.iv + e.ciphertext + e.authTag];
  });
  return { curve: key.curve, publicKey: svc.getPublicKey(key.curve), variables };
}

async function envDecrypt(req) {
  const curve = req.curve || 'p256';
  const svc = await envService(req.processorPrivateKey, curve);
  const shared = await svc.generateSharedKey(req.deployerPublicKey, curve);
  return {
    vars: req.variables.map(([k, v]) => ({ key: Buffer.from(k, 'hex').toString('utf8'), value: svc.decrypt(svc.processEncryptedHex(v), shared) })),
  };
}

function tunnelId(req) {
  const key = crypto.createPrivateKey({ key: Buffer.from(req.key, 'base64'), format: 'der', type: 'pkcs8' });
  const jwk = crypto.createPublicKey(key).export({ format: 'jwk' });
  const x = Buffer.from(jwk.x, 'base64url');
  const y = Buffer.from(jwk.y, 'base64url');
  const comp = Buffer.concat([Buffer.from([y[y.length - 1] & 1 ? 3 : 2]), x]);
  return { clientId: crypto.createHash('sha256').update(comp).digest().subarray(0, 8).toString('hex') };
}

async function wallet() {
  const m = process.env.ACURAST_MNEMONIC;
  if (!m) throw new Error('ACURAST_MNEMONIC is not set');
  const { walletFromMnemonic } = await chain();
  return walletFromMnemonic(m);
}

async function estimate(req) {
  const { fetchPricingAdvice, getProcessorCount } = await import('@acurast/sdk/matcher');
  const address = process.env.ACURAST_MNEMONIC ? (await wallet()).address : req.address;
  const count = await getProcessorCount(req.matcherUrl);
  if (!count.ok) return { reachable: false, error: count.error };
  const advice = await fetchPricingAdvice(req.config, address, req.matcherUrl);
  return { reachable: true, processors: count.data.count, advice: advice ?? null };
}

async function pin(req) {
  const { uploadScript } = await sdk();
  const url = await uploadScript({ file: req.file }, { endpoint: req.endpoint, apiKey: process.env.ACURAST_IPFS_API_KEY || '' });
  return { url };
}

async function deploy(req) {
  const { deployProject, InMemoryKeyStore } = await sdk();
  const { convertConfigToJob } = await chain();
  const w = await wallet();
  out('event', { status: 'Wallet', address: w.address });
  const results = [];
  for (let i = 0; i < req.replicas.length; i++) {
    const { config, envVars } = req.replicas[i];
    const job = convertConfigToJob(config);
    let jobId = null;
    let resolveEnv;
    const envDone = new Promise((r) => (resolveEnv = r));
    const onStatus = (status, data) => {
      const ev = { replica: i, status };
      if (status === 'Uploaded') ev.ipfs = data && data.ipfsHash;
      if (status === 'WaitingForMatch') ev.jobIds = data && data.jobIds;
      if (status === 'Acknowledged') ev.acknowledged = data && data.acknowledged;
      if (status === 'Submit' || status === 'EnvironmentVariablesSet') ev.hash = data && (data.txHash || data.hash);
      if (status === 'WaitingForMatch' && data && data.jobIds) jobId = data.jobIds[0];
      out('event', ev);
      if (status === 'EnvironmentVariablesSet') resolveEnv(true);
    };
    await deployProject(config, job, {
      wallet: w,
      rpcEndpoint: req.rpc,
      ipfs: { endpoint: req.ipfs.endpoint, apiKey: process.env.ACURAST_IPFS_API_KEY || '' },
      envVars,
      statusCallback: onStatus,
      keyStore: new InMemoryKeyStore(),
      bundleFolder: req.workDir,
    });
    results.push({ replica: i, jobId, startTime: job.schedule.startTime, envDone });
  }
  const timeout = new Promise((r) => setTimeout(() => r(false), req.timeoutMs || 15 * 60000));
  for (const r of results) {
    r.envSet = await Promise.race([r.envDone, timeout]);
    delete r.envDone;
  }
  return { address: w.address, replicas: results };
}

async function stop(req) {
  const { AcurastService } = await chain();
  const w = await wallet();
  const svc = new AcurastService(req.rpc);
  const api = await svc.connect();
  const hashes = [];
  for (const id of req.jobIds) {
    const hash = await new Promise((resolve, reject) => {
      api.tx.acurast
        .deregister(id)
        .signAndSend(w, ({ status, dispatchError, txHash }) => {
          if (dispatchError) reject(new Error(dispatchError.toString()));
          else if (status.isInBlock) resolve(txHash.toHex());
        })
        .catch(reject);
    });
    out('event', { status: 'Deregistered', jobId: id, hash });
    hashes.push(hash);
  }
  await svc.disconnect();
  return { hashes };
}

async function validate(req) {
  const { validateConfig } = await sdk();
  return {
    results: req.configs.map((c) => {
      const r = validateConfig(c);
      return r.success ? { ok: true, notes: (r.notes || []).map((n) => n.message) } : { ok: false, error: String(r.error && r.error.message ? r.error.message : r.error) };
    }),
  };
}

function version() {
  const dir = new URL('./node_modules/', import.meta.url);
  const v = (p) => JSON.parse(fs.readFileSync(new URL(`${p}/package.json`, dir), 'utf8')).version;
  return { sdk: v('@acurast/sdk'), polkadotApi: v('@polkadot/api'), node: process.versions.node };
}

// batch runs several offline ops in one process (loading polkadot once): {ops:[{op, req}]} -> {results:[{ok,
// result|error}]}. Only the ops without network access are allowed.
async function batch(req) {
  const offline = ['version', 'validate', 'encode-deploy', 'env-encrypt', 'env-decrypt', 'tunnel-id'];
  const results = [];
  for (const { op, req: r } of req.ops) {
    try {
      if (!offline.includes(op)) throw new Error(`op ${op} is not allowed in a batch`);
      results.push({ ok: true, result: await ops[op](r) });
    } catch (e) {
      results.push({ ok: false, error: e && e.message ? e.message : String(e) });
    }
  }
  return { results };
}

const ops = {
  batch,
  version,
  validate,
  'encode-deploy': encodeDeploy,
  'env-encrypt': envEncrypt,
  'env-decrypt': envDecrypt,
  'tunnel-id': tunnelId,
  estimate,
  pin,
  deploy,
  stop,
};

const op = process.argv[2];
try {
  if (!ops[op]) throw new Error(`unknown op ${op}; want one of ${Object.keys(ops).join(', ')}`);
  out('result', await ops[op](readStdin()));
  process.exit(0);
} catch (e) {
  out('error', { message: e && e.message ? e.message : String(e) });
  process.exit(1);
}
