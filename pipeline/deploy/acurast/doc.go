// Package acurast is the Acurast phone-fleet target of pipeline/deploy.
//
// It writes the deployment configuration in the vocabulary of acurast.json (one project per replica, so that
// each phone gets its own tunnel key and therefore its own, precomputed URL — the approach of Acurast's
// app-cargo-laya example; replicas of one job that share a key would fight over one URL), and deploys through
// the official @acurast/sdk (npm, pinned in node/package.json, installed on first use into
// $PHONELLM_HOME/npm/acurast), driven by node/driver.mjs: IPFS pin of the bundle, the
// AcurastMarketplace.deploy extrinsic, waiting for matching and acknowledgement, and the SDK's per-processor
// encryption of the secrets (API key, Hub token, tunnel key) submitted with Acurast.setEnvironments.
//
// The mnemonic is read from ACURAST_MNEMONIC by the Node driver only; phonellm never writes it to disk or logs.
// A dry run ([Fleet.Plan]) produces the full plan — bundle sha256 and its IPFS CIDv0 (computed offline),
// acurast.json, the SCALE-encoded deploy call of every replica (encoded in Go and, when the SDK is installed,
// cross-checked against the SDK's convertConfigToJob + @polkadot/types), the locked cost and the matcher's
// price advice when it is reachable — and stops before anything is signed.
//
// Sources: shared reference acurast.md (§1.3 config, §2 pipeline, §2.4 call layout, §2.6 env encryption,
// §3.4 tunnel, §5 pricing).
package acurast
