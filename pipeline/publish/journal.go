package publish

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/phonellm/phonellm/internal/fsx"
)

// journal remembers, per repo and revision, the sha256 of local files (by
// path, size and modification time) and the multipart parts the storage
// accepted, so a killed run resumes without re-hashing or re-sending. It is
// saved atomically after every change and removed after a verified commit.
type journal struct {
	mu   sync.Mutex
	path string
	data journalData
}

type journalData struct {
	Version int                      `json:"version"`
	Repo    string                   `json:"repo"`
	Rev     string                   `json:"revision"`
	Hashes  map[string]journalHash   `json:"hashes"`  // absolute local path → hash
	Uploads map[string]journalUpload `json:"uploads"` // oid → multipart progress
}

type journalHash struct {
	Size    int64  `json:"size"`
	ModNano int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
	GitSHA1 string `json:"git_sha1,omitempty"` // files small enough to commit inline
}

type journalUpload struct {
	UploadID  string         `json:"upload_id"` // identity of the multipart upload
	ChunkSize int64          `json:"chunk_size"`
	Parts     map[int]string `json:"parts"` // part number → ETag
}

const journalVersion = 1

// journalPath names the journal of one endpoint/repo/revision in dir.
func journalPath(dir, endpoint, repo, rev string) string {
	s := sha256.Sum256([]byte(endpoint + "\x00" + repo + "\x00" + rev))
	return filepath.Join(dir, "publish-"+hex.EncodeToString(s[:8])+".json")
}

// openJournal loads a journal, or starts an empty one when the file is
// missing, unreadable or of another version (a journal is only a cache).
func openJournal(path, repo, rev string) *journal {
	j := &journal{path: path}
	if b, err := os.ReadFile(path); err == nil && len(b) < 64<<20 {
		var d journalData
		if json.Unmarshal(b, &d) == nil && d.Version == journalVersion && d.Repo == repo && d.Rev == rev {
			j.data = d
		}
	}
	j.data.Version, j.data.Repo, j.data.Rev = journalVersion, repo, rev
	if j.data.Hashes == nil {
		j.data.Hashes = map[string]journalHash{}
	}
	if j.data.Uploads == nil {
		j.data.Uploads = map[string]journalUpload{}
	}
	return j
}

func (j *journal) hash(abs string, size, mod int64) (journalHash, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	h, ok := j.data.Hashes[abs]
	if !ok || h.Size != size || h.ModNano != mod {
		return journalHash{}, false
	}
	return h, true
}

func (j *journal) setHash(abs string, h journalHash) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.data.Hashes[abs] = h
	return j.saveLocked()
}

// parts returns the accepted parts of oid's upload, if the journal's upload
// is the same one the storage just offered.
func (j *journal) parts(oid, uploadID string, chunk int64) map[int]string {
	j.mu.Lock()
	defer j.mu.Unlock()
	u, ok := j.data.Uploads[oid]
	if !ok || u.UploadID != uploadID || u.ChunkSize != chunk {
		return nil
	}
	out := make(map[int]string, len(u.Parts))
	for k, v := range u.Parts {
		out[k] = v
	}
	return out
}

// startUpload records a new multipart upload, dropping parts of any older
// one (they belong to an upload the storage no longer offers).
func (j *journal) startUpload(oid, uploadID string, chunk int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if u, ok := j.data.Uploads[oid]; ok && u.UploadID == uploadID && u.ChunkSize == chunk {
		return nil
	}
	j.data.Uploads[oid] = journalUpload{UploadID: uploadID, ChunkSize: chunk, Parts: map[int]string{}}
	return j.saveLocked()
}

func (j *journal) addPart(oid string, n int, etag string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	u, ok := j.data.Uploads[oid]
	if !ok {
		return fmt.Errorf("journal: part %d of unknown upload %s", n, oid)
	}
	u.Parts[n] = etag
	return j.saveLocked()
}

func (j *journal) doneUpload(oid string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.data.Uploads[oid]; !ok {
		return nil
	}
	delete(j.data.Uploads, oid)
	return j.saveLocked()
}

// remove deletes the journal after a verified commit.
func (j *journal) remove() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// saveLocked writes the journal atomically: temp file, fsync, rename.
func (j *journal) saveLocked() error {
	if j.path == "" {
		return nil
	}
	b, err := json.Marshal(j.data)
	if err != nil {
		return err
	}
	dir := filepath.Dir(j.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if _, err := fsx.WriteFile(j.path, b); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}
