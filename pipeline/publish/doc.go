// Package publish uploads phonellm's artifacts (quantized GGUFs and a model
// card) to a Hugging Face Hub model repo, the way the official clients do it
// on the Git-LFS path (shared reference hf-hub.md §1): create repo → preupload
// → LFS batch → basic or multipart PUTs to presigned URLs (never carrying the
// Hub token, always with Content-Length) → multipart completion → verify →
// NDJSON commit with parentCommit → list the new revision and compare every
// file's size and sha256 with what was meant.
//
// Each file is hashed once while it is read; the hash is kept in a small
// journal next to the accepted multipart parts, so a run killed mid-upload
// resumes without re-hashing and without re-sending the parts the storage
// already accepted. Objects the Hub already has are skipped. The commit is
// never repeated blindly: after an ambiguous failure the branch head is read
// to learn whether the commit landed.
//
// The token goes to the Hub's origin only (scheme, host and port), and API
// calls follow redirects under httpx.CheckRedirect, the policy downloads use
// too: net/http alone would forward Authorization to another port of the
// same host or to a subdomain. Presigned storage URLs never follow redirects.
// Every refusal is an hfhub.HubError (HubError here), with the Hub's message
// capped to one line and a hint.
//
// Run is the stage entry point; Client is the protocol client; Card renders
// the README.md model card.
package publish
