// Package hfhub is the download side of the Hugging Face Hub, shared by the
// runtime (model fetch on a phone) and by `phonellm init --base HF_ID`.
//
// It resolves `{endpoint}/{repo}/resolve/{revision}/{file}` without following
// cross-host redirects, reads the expected size and sha256 from X-Linked-Size
// and X-Linked-Etag (git blob sha1 from ETag for non-LFS files), downloads with
// resumable Range requests into the huggingface_hub cache layout
//
//	$HF_HUB_CACHE/models--org--name/blobs/<sha256>
//	$HF_HUB_CACHE/models--org--name/snapshots/<commit>/<file>  -> ../../blobs/<sha256>
//	$HF_HUB_CACHE/models--org--name/refs/<revision>            (commit sha)
//
// and verifies size and hash before a blob becomes visible. A cached blob that
// is truncated or corrupt is detected (it is re-hashed on every call unless
// Client.TrustVerified is set, which then only re-hashes blobs whose size or
// modification time changed) and fetched again. The Hub token is sent
// to the Hub's origin only (scheme, host and port: httpx.SameOrigin), never
// to the CDN a resolve redirects to; other requests follow redirects under
// httpx.CheckRedirect, the policy the upload client uses too, which drops the
// token once a redirect leaves the Hub's origin.
//
// Every non-success answer, here and in pipeline/publish, is a *HubError:
// the remote's message capped to one line, a hint for people, and the error
// classes of pipeline/errors.go (RemoteError, or InputError for a file or
// revision that does not exist).
//
// Environment (huggingface_hub constants.py): HF_ENDPOINT, HF_HOME,
// HF_HUB_CACHE, HF_TOKEN (alias HUGGING_FACE_HUB_TOKEN), HF_TOKEN_PATH
// (default $HF_HOME/token).
package hfhub
