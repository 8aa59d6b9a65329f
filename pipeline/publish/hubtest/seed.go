package hubtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Seed commits files to a branch of repoID directly (creating the public
// repo if needed), storing LFS objects for the paths the preupload rule puts
// in LFS. It returns the new commit id. Tests of the download side use it to
// set up a repo without going through the upload protocol.
func (h *Hub) Seed(repoID, branch string, files map[string][]byte) (string, error) {
	if branch == "" {
		branch = "main"
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		if !validRepoPath(p) {
			return "", fmt.Errorf("hubtest: seed %s: invalid path %q", repoID, p)
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	entries := map[string]*entry{}
	for _, p := range paths {
		b := files[p]
		if !h.wantsLFS(p, int64(len(b)), b[:min(len(b), 512)]) {
			entries[p] = &entry{size: int64(len(b)), content: b, blobID: gitBlobID(b)}
			continue
		}
		s := sha256.Sum256(b)
		oid := hex.EncodeToString(s[:])
		tmp, err := os.CreateTemp(filepath.Join(h.dir, "tmp"), "seed-*")
		if err != nil {
			return "", err
		}
		_, werr := tmp.Write(b)
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(tmp.Name())
			return "", werr
		}
		if err := h.storeObject(tmp.Name(), oid, int64(len(b))); err != nil {
			return "", err
		}
		ptr := lfsPointer(oid, int64(len(b)))
		entries[p] = &entry{size: int64(len(b)), lfsOid: oid, blobID: gitBlobID(ptr), pointer: len(ptr)}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	rp := h.createRepoLocked(repoID, false)
	parent := rp.branches[branch]
	next := map[string]*entry{}
	if pc := rp.commits[parent]; pc != nil {
		for p, e := range pc.files {
			next[p] = e
		}
	}
	for p, e := range entries {
		next[p] = e
	}
	c := &commit{parent: parent, summary: "seed", files: next}
	c.oid = h.newCommitOid(repoID, parent, c.summary)
	rp.commits[c.oid] = c
	rp.branches[branch] = c.oid
	return c.oid, nil
}

// SetPrivate changes a repo's visibility.
func (h *Hub) SetPrivate(repoID string, private bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rp, ok := h.repos[repoID]; ok {
		rp.private = private
	}
}
