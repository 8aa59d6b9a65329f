package hfhub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/retry"
)

// Local is a verified file in the cache.
type Local struct {
	Path string   `json:"path"` // snapshots/<commit>/<file> (a symlink to Blob)
	Blob string   `json:"blob"` // blobs/<etag>
	Info FileInfo `json:"info"`
	// Fetched is the number of bytes transferred by this call (0 when the
	// cache already held a verified copy).
	Fetched int64 `json:"fetched"`
}

// Download makes repo/file@revision available in the cache, verified by size
// and hash, and returns its snapshot path. progress, if not nil, receives the
// byte count of every chunk written (a resumed download reports only the new
// bytes).
func (c *Client) Download(ctx context.Context, repo, revision, file string, progress func(n int64)) (Local, error) {
	if c.CacheDir == "" {
		return Local{}, errors.New("hfhub: Client.CacheDir is empty")
	}
	info, err := c.Stat(ctx, repo, revision, file)
	if err != nil {
		return Local{}, err
	}
	repoDir := filepath.Join(c.CacheDir, RepoFolderName(repo))
	blob := filepath.Join(repoDir, "blobs", info.ETag())
	snap := filepath.Join(repoDir, "snapshots", info.Commit, filepath.FromSlash(file))
	loc := Local{Path: snap, Blob: blob, Info: info}

	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return Local{}, fmt.Errorf("hfhub: cache: %w", err)
	}
	unlock, err := lockFile(blob + ".lock")
	if err != nil {
		return Local{}, err
	}
	defer unlock()

	if c.TrustVerified && c.markerValid(repo, blob, info) {
		// Verified earlier and untouched since.
	} else if verr := verifyFile(blob, info); verr == nil {
		c.writeMarker(repo, blob, info)
	} else {
		if !errors.Is(verr, os.ErrNotExist) {
			// Truncated or corrupt: never trust it again.
			if err := os.Remove(blob); err != nil && !errors.Is(err, os.ErrNotExist) {
				return Local{}, fmt.Errorf("hfhub: removing corrupt cache blob: %w", err)
			}
		}
		c.removeMarker(repo, info)
		n, err := c.fetch(ctx, info, blob, progress)
		loc.Fetched = n
		if err != nil {
			return loc, err
		}
		c.writeMarker(repo, blob, info)
	}
	if err := linkSnapshot(blob, snap); err != nil {
		return loc, err
	}
	if revision != "" && revision != info.Commit {
		if err := writeRef(repoDir, revision, info.Commit); err != nil {
			return loc, err
		}
	}
	return loc, nil
}

// newHasher returns the hash that names the blob: sha256 for LFS files, the
// git blob sha1 ("blob <size>\x00" + content) for regular files.
func newHasher(info FileInfo) hash.Hash {
	if info.SHA256 != "" {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", info.Size)
	return h
}

// verifyFile checks size and hash of an existing file.
func verifyFile(path string, info FileInfo) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != info.Size {
		return &IntegrityError{Path: path, WantSize: info.Size, GotSize: st.Size(), SizeFailed: true}
	}
	h := newHasher(info)
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hfhub: reading %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != info.ETag() {
		return &IntegrityError{Path: path, Want: info.ETag(), Got: got}
	}
	return nil
}

// fetch downloads into blob+".incomplete", resuming from what is there,
// verifies, then renames to blob. It returns the bytes transferred.
func (c *Client) fetch(ctx context.Context, info FileInfo, blob string, progress func(int64)) (int64, error) {
	part := blob + ".incomplete"
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("hfhub: cache: %w", err)
	}
	keep := false
	defer func() {
		f.Close()
		if !keep {
			os.Remove(part)
		}
	}()

	// Hash what an earlier run left, so resuming costs no second download.
	h := newHasher(info)
	have, err := io.Copy(h, f)
	if err != nil {
		return 0, fmt.Errorf("hfhub: reading %s: %w", part, err)
	}
	if have > info.Size {
		if err := f.Truncate(0); err != nil {
			return 0, err
		}
		h, have = newHasher(info), 0
	}
	var fetched int64
	restarted := false
	for {
		err = c.Retry.Do(ctx, func(int) error {
			n, err := c.fetchRange(ctx, &info, f, h, have, progress)
			fetched += n
			have += n
			if errors.Is(err, errRangeIgnored) {
				// A 200 to a Range request (huggingface_hub file_download.py
				// http_get): the body starts at 0, so start over.
				h, have = newHasher(info), 0
				if terr := f.Truncate(0); terr != nil {
					return terr
				}
				if _, serr := f.Seek(0, io.SeekStart); serr != nil {
					return serr
				}
				return retry.Transient(err)
			}
			return err
		})
		if err != nil {
			// Keep verified-so-far bytes for the next run to resume from;
			// they are re-hashed then, so a bad prefix is caught.
			keep = have > 0
			return fetched, err
		}
		got := hex.EncodeToString(h.Sum(nil))
		if have == info.Size && got == info.ETag() {
			break
		}
		ierr := &IntegrityError{Path: info.Repo + "/" + info.Path, Want: info.ETag(), Got: got, WantSize: info.Size, GotSize: have, SizeFailed: have != info.Size}
		if restarted {
			return fetched, ierr
		}
		// Bytes on disk from an earlier run may have been corrupt: one clean
		// retry from zero, then give up.
		restarted = true
		if err := f.Truncate(0); err != nil {
			return fetched, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fetched, err
		}
		h, have = newHasher(info), 0
	}
	if err := f.Sync(); err != nil {
		return fetched, fmt.Errorf("hfhub: sync %s: %w", part, err)
	}
	if err := f.Close(); err != nil {
		return fetched, err
	}
	if err := os.Rename(part, blob); err != nil {
		return fetched, fmt.Errorf("hfhub: cache: %w", err)
	}
	keep = true // renamed away; nothing to remove
	fsx.SyncDir(filepath.Dir(blob))
	return fetched, nil
}

// fetchRange GETs bytes [have, Size) and appends them to f and h.
func (c *Client) fetchRange(ctx context.Context, info *FileInfo, f *os.File, h hash.Hash, have int64, progress func(int64)) (int64, error) {
	if have == info.Size {
		return 0, nil
	}
	u, err := url.Parse(info.URL)
	if err != nil {
		return 0, fmt.Errorf("hfhub: download URL: %w", err)
	}
	// One watchdog bounds the wait for headers and every gap between body
	// reads: a stalled CDN connection is cut and the download resumes.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stalled atomic.Bool
	wd := time.AfterFunc(c.timeout(), func() { stalled.Store(true); cancel() })
	defer wd.Stop()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, info.URL, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", c.userAgent())
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	if c.Token != "" && c.sameHost(u) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.following().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if stalled.Load() {
			err = fmt.Errorf("no response within %v: %w", c.timeout(), context.DeadlineExceeded)
		}
		if stalled.Load() || retry.NetworkError(err) {
			return 0, retry.Transient(fmt.Errorf("hfhub: download %s: %w", info.Path, err))
		}
		return 0, fmt.Errorf("hfhub: download %s: %w", info.Path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		start, err := contentRangeStart(resp.Header.Get("Content-Range"))
		if err != nil || start != have {
			return 0, fmt.Errorf("hfhub: download %s: Content-Range %q does not start at %d", info.Path, resp.Header.Get("Content-Range"), have)
		}
	case resp.StatusCode == http.StatusOK && have > 0:
		return 0, errRangeIgnored
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusForbidden && !c.sameHost(u):
		// Signed CDN URL expired: resolve again for a fresh one.
		fresh, err := c.statOnce(ctx, info.Repo, info.Commit, info.Path)
		if err != nil {
			return 0, err
		}
		if fresh.ETag() != info.ETag() || fresh.Size != info.Size {
			return 0, fmt.Errorf("hfhub: download %s: file changed at commit %s (etag %s → %s)", info.Path, info.Commit, info.ETag(), fresh.ETag())
		}
		info.URL = fresh.URL
		return 0, retry.Transient(c.statusError("download", u.String(), resp))
	default:
		return 0, c.statusError("download", u.String(), resp)
	}
	want := info.Size - have
	if resp.ContentLength >= 0 && resp.ContentLength != want {
		return 0, fmt.Errorf("hfhub: download %s: Content-Length %d, want %d", info.Path, resp.ContentLength, want)
	}
	w := io.MultiWriter(f, h)
	buf := make([]byte, 1<<20)
	var n int64
	for n < want {
		k, rerr := resp.Body.Read(buf[:min(int64(len(buf)), want-n)])
		wd.Reset(c.timeout())
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, fmt.Errorf("hfhub: writing cache: %w", werr)
			}
			n += int64(k)
			if progress != nil {
				progress(int64(k))
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			if stalled.Load() {
				rerr = fmt.Errorf("no data for %v: %w", c.timeout(), context.DeadlineExceeded)
			}
			return n, retry.Transient(fmt.Errorf("hfhub: download %s: connection lost after %d of %d bytes: %w", info.Path, have+n, info.Size, rerr))
		}
	}
	if n < want {
		return n, retry.Transient(fmt.Errorf("hfhub: download %s: body ended after %d of %d bytes: %w", info.Path, have+n, info.Size, io.ErrUnexpectedEOF))
	}
	return n, nil
}

func contentRangeStart(v string) (int64, error) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, fmt.Errorf("bad Content-Range")
	}
	first, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, fmt.Errorf("bad Content-Range")
	}
	return strconv.ParseInt(first, 10, 64)
}

// linkSnapshot points snap at blob with a relative symlink, atomically.
func linkSnapshot(blob, snap string) error {
	if err := os.MkdirAll(filepath.Dir(snap), 0o755); err != nil {
		return fmt.Errorf("hfhub: snapshot: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(snap), blob)
	if err != nil {
		return fmt.Errorf("hfhub: snapshot: %w", err)
	}
	if cur, err := os.Readlink(snap); err == nil && cur == rel {
		return nil
	}
	tmp := snap + ".tmp-link"
	os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("hfhub: snapshot: %w", err)
	}
	if err := os.Rename(tmp, snap); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hfhub: snapshot: %w", err)
	}
	fsx.SyncDir(filepath.Dir(snap))
	return nil
}

// writeRef records refs/<revision> = commit, atomically.
func writeRef(repoDir, revision, commit string) error {
	if err := ValidatePath(revision); err != nil {
		return fmt.Errorf("hfhub: ref %q: %w", revision, err)
	}
	p := filepath.Join(repoDir, "refs", filepath.FromSlash(revision))
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("hfhub: ref: %w", err)
	}
	if _, err := fsx.WriteFile(p, []byte(commit)); err != nil {
		return fmt.Errorf("hfhub: ref: %w", err)
	}
	return nil
}

// markerPath is where the "fully verified" marker of a blob lives, outside
// the huggingface_hub layout so other tools see an unchanged cache.
func (c *Client) markerPath(repo string, info FileInfo) string {
	return filepath.Join(c.CacheDir, ".phonellm-verified", RepoFolderName(repo), info.ETag())
}

func markerText(st os.FileInfo) string {
	return strconv.FormatInt(st.Size(), 10) + " " + strconv.FormatInt(st.ModTime().UnixNano(), 10)
}

func (c *Client) markerValid(repo, blob string, info FileInfo) bool {
	st, err := os.Stat(blob)
	if err != nil || st.Size() != info.Size {
		return false
	}
	b, err := os.ReadFile(c.markerPath(repo, info))
	return err == nil && string(b) == markerText(st)
}

// writeMarker records a full verification; failures only cost a re-hash
// next time, so they are ignored.
func (c *Client) writeMarker(repo, blob string, info FileInfo) {
	st, err := os.Stat(blob)
	if err != nil {
		return
	}
	p := c.markerPath(repo, info)
	if os.MkdirAll(filepath.Dir(p), 0o755) != nil {
		return
	}
	fsx.WriteFile(p, []byte(markerText(st)))
}

func (c *Client) removeMarker(repo string, info FileInfo) {
	os.Remove(c.markerPath(repo, info))
}
