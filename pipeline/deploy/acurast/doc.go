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
// [Fleet.Ship] is the target's part of the ship stage (deploy.Run): it builds the bundle for the fleet's
// network with the phone profile's RAM as the phones' RAM floor, then plans or deploys. A dry run can be
// planned before the model is on the Hub (deploy.Run gives it a placeholder URL under the .invalid domain,
// labelled in the result) or after a publish to a local test Hub (noted in the plan); a real deploy needs an
// https URL. The plan carries what the summary shows: the model URL, each job's lifetime and end (24 h by
// default, after which the phones stop serving), the RAM floor, and the cost per phone and locked in total.
//
// Sources: shared reference acurast.md (§1.3 config, §2 pipeline, §2.4 call layout, §2.6 env encryption,
// §3.4 tunnel, §5 pricing).
package acurast
