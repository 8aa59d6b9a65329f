// Package hubtest is a strict in-process fake of the Hugging Face Hub for
// tests: the subset phonellm and the official clients use to publish and to
// download a model repo.
//
// It enforces the protocol rather than echoing it (docs: shared reference
// hf-hub.md §4.1): every uploaded object is checked for size and sha256, a
// commit naming an object that was not uploaded (or not yet completed) is
// rejected, the Hub token is refused on presigned storage URLs, multipart part
// counts, part sizes and ETags are enforced, PUTs must carry Content-Length,
// `parentCommit` conflicts answer 412, and commits are atomic. Downloads are
// served like the Hub: resolve answers 302 to a storage host with a different
// host name (so clients must not forward the token) with X-Linked-Etag and
// X-Linked-Size; storage honours Range.
//
// Faults (429, 5xx, hangs, dropped connections before or after the request
// took effect, expired signatures, truncated or Range-ignoring downloads,
// redirects to another origin) can be injected at any step with Hub.Inject.
// AltURL serves the same API on a second port, a second origin for those
// redirects; every logged Request says which host and port it reached and
// whether it carried Authorization.
package hubtest
