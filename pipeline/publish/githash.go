package publish

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"hash"
)

type gitHasher struct{ hash.Hash }

// newGitHasher hashes like git for a blob of size bytes.
func newGitHasher(size int64) *gitHasher {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	return &gitHasher{h}
}

// gitBlobSHA1 is the git blob id of content: sha1("blob <n>\0" + content).
func gitBlobSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}
