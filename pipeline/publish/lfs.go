package publish

import (
	"context"
	"errors"
	"fmt"
	"github.com/phonellm/phonellm/pipeline"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/internal/retry"
	"github.com/phonellm/phonellm/pipeline/hfhub"
)

// lfsAction is one action of an LFS batch answer (git-lfs docs/api/batch.md).
type lfsAction struct {
	Href   string            `json:"href"`
	Header map[string]string `json:"header"`
}

type batchAnswer struct {
	Transfer string `json:"transfer"`
	Objects  []struct {
		Oid     string `json:"oid"`
		Size    int64  `json:"size"`
		Actions *struct {
			Upload *lfsAction `json:"upload"`
			Verify *lfsAction `json:"verify"`
		} `json:"actions"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"objects"`
}

const lfsMedia = "application/vnd.git-lfs+json"

// maxChunk bounds a multipart chunk size announced by the Hub (S3's 5 GiB
// single-part limit).
const maxChunk = 5 << 30

// batch asks the LFS batch API for upload actions (≤ 256 objects per call,
// as huggingface_hub UPLOAD_BATCH_MAX_NUM_FILES).
func (c *Client) batch(ctx context.Context, repo, rev string, objs []localObject) (batchAnswer, error) {
	var all batchAnswer
	for start := 0; start < len(objs); start += 256 {
		chunk := objs[start:min(start+256, len(objs))]
		list := make([]map[string]any, len(chunk))
		for i, o := range chunk {
			list[i] = map[string]any{"oid": o.Oid, "size": o.Size}
		}
		_, body, err := c.do(ctx, call{op: "lfs batch", method: http.MethodPost, url: c.apiURL("/" + repo + ".git/info/lfs/objects/batch"),
			body: jsonBody(map[string]any{"operation": "upload", "transfers": []string{"basic", "multipart"}, "hash_algo": "sha256",
				"ref": map[string]string{"name": rev}, "objects": list}),
			contentType: lfsMedia, accept: lfsMedia, auth: true, idempotent: true})
		if err != nil {
			return all, err
		}
		var a batchAnswer
		if err := decode("lfs batch", body, &a); err != nil {
			return all, err
		}
		all.Transfer = a.Transfer
		all.Objects = append(all.Objects, a.Objects...)
	}
	return all, nil
}

// localObject is a local file to store as an LFS object.
type localObject struct {
	Local string // local path
	Name  string // repo path, for messages
	Oid   string
	Size  int64
}

// rebatchError means the object's actions are no longer usable (expired
// signature, upload gone): ask the batch API again.
type rebatchError struct{ err error }

func (e *rebatchError) Error() string { return e.err.Error() }
func (e *rebatchError) Unwrap() error { return e.err }

// uploadLFS makes sure every object is stored, uploading what the Hub lacks.
// Objects whose actions went stale are re-batched, at most three rounds.
func (c *Client) uploadLFS(ctx context.Context, repo, rev string, objs []localObject, jr *journal, rep Reporter, sent *atomic.Int64) error {
	pending := objs
	for round := 1; len(pending) > 0; round++ {
		ans, err := c.batch(ctx, repo, rev, pending)
		if err != nil {
			return err
		}
		byOid := map[string]localObject{}
		for _, o := range pending {
			byOid[o.Oid] = o
		}
		var again []localObject
		seen := map[string]bool{}
		for _, a := range ans.Objects {
			o, ok := byOid[a.Oid]
			if !ok || seen[a.Oid] {
				return fmt.Errorf("hub lfs batch: answer names object %s that was not asked for (or twice)", a.Oid)
			}
			seen[a.Oid] = true
			if a.Error != nil {
				return &HubError{Op: "lfs batch for " + o.Name, Status: a.Error.Code, Message: httpx.CapText(a.Error.Message, hfhub.MaxMessage), Write: true}
			}
			if a.Size != o.Size {
				return fmt.Errorf("hub lfs batch: %s: answer size %d, want %d", o.Name, a.Size, o.Size)
			}
			if a.Actions == nil || a.Actions.Upload == nil {
				rep.Note(pipeline.Info, fmt.Sprintf("%s: already on the Hub (%s), not uploaded", o.Name, o.Oid[:12]))
				rep.Add(o.Size)
				if err := jr.doneUpload(o.Oid); err != nil {
					return err
				}
				continue
			}
			err := c.uploadObject(ctx, o, a.Actions.Upload, jr, rep, sent)
			var rb *rebatchError
			if errors.As(err, &rb) && round < 3 {
				rep.Note(pipeline.Warn, fmt.Sprintf("%s: %v; asking the Hub for fresh upload URLs", o.Name, err))
				again = append(again, o)
				continue
			}
			if err != nil {
				return err
			}
			if v := a.Actions.Verify; v != nil {
				if err := c.verifyObject(ctx, v, o); err != nil {
					return err
				}
			}
		}
		if len(seen) != len(pending) {
			return fmt.Errorf("hub lfs batch: answer covers %d of %d objects", len(seen), len(pending))
		}
		pending = again
	}
	return nil
}

func (c *Client) verifyObject(ctx context.Context, v *lfsAction, o localObject) error {
	if !c.sameHost(v.Href) {
		return fmt.Errorf("hub lfs verify for %s: verify URL %s is not on the Hub's host; refusing to send the token", o.Name, redact(v.Href))
	}
	_, _, err := c.do(ctx, call{op: "lfs verify " + o.Name, method: http.MethodPost, url: v.Href,
		body: jsonBody(map[string]any{"oid": o.Oid, "size": o.Size}), contentType: lfsMedia, accept: lfsMedia, auth: true, idempotent: true})
	return err
}

func redact(u string) string {
	if p, err := url.Parse(u); err == nil {
		p.RawQuery = ""
		return p.String()
	}
	return "(url)"
}

func (c *Client) uploadObject(ctx context.Context, o localObject, up *lfsAction, jr *journal, rep Reporter, sent *atomic.Int64) error {
	f, err := os.Open(o.Local)
	if err != nil {
		return fmt.Errorf("publish: %s: %w", o.Name, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != o.Size {
		return fmt.Errorf("publish: %s changed since it was hashed (size now differs)", o.Local)
	}
	if cs, ok := up.Header["chunk_size"]; ok {
		return c.uploadMultipart(ctx, f, o, up, cs, jr, rep, sent)
	}
	extra := map[string]string{}
	for k, v := range up.Header {
		extra[k] = v
	}
	_, err = c.putStorage(ctx, "upload "+o.Name, up.Href, extra, f, 0, o.Size, rep, sent)
	return err
}

func (c *Client) uploadMultipart(ctx context.Context, f *os.File, o localObject, up *lfsAction, chunkStr string, jr *journal, rep Reporter, sent *atomic.Int64) error {
	chunk, err := strconv.ParseInt(chunkStr, 10, 64)
	if err != nil || chunk <= 0 || chunk > maxChunk {
		return fmt.Errorf("hub lfs batch: %s: chunk_size %q: want 1..%d", o.Name, chunkStr, int64(maxChunk))
	}
	nparts := int((o.Size + chunk - 1) / chunk)
	urls := map[int]string{}
	for k, v := range up.Header {
		if k == "" || k == "chunk_size" {
			continue
		}
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 || !isDigits(k) {
			continue
		}
		urls[n] = v
	}
	if len(urls) != nparts {
		return fmt.Errorf("hub lfs batch: %s: invalid server response to upload large LFS file: %d part URLs for %d bytes in %d-byte chunks (want %d)", o.Name, len(urls), o.Size, chunk, nparts)
	}
	for n := 1; n <= nparts; n++ {
		if urls[n] == "" {
			return fmt.Errorf("hub lfs batch: %s: part %d has no URL", o.Name, n)
		}
	}
	id := uploadIdentity(up.Href)
	if err := jr.startUpload(o.Oid, id, chunk); err != nil {
		return err
	}
	etags := jr.parts(o.Oid, id, chunk)
	if etags == nil {
		etags = map[int]string{}
	}
	var mu sync.Mutex
	resumed := int64(0)
	for n := range etags {
		resumed += partLen(o.Size, chunk, n)
	}
	if resumed > 0 {
		rep.Note(pipeline.Info, fmt.Sprintf("%s: resuming, %d of %d parts already accepted", o.Name, len(etags), nparts))
		rep.Add(resumed)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.parallel())
	var missing []int
	for n := 1; n <= nparts; n++ {
		if etags[n] == "" {
			missing = append(missing, n)
		}
	}
	for _, n := range missing {
		g.Go(func() error {
			off := int64(n-1) * chunk
			etag, err := c.putStorage(gctx, fmt.Sprintf("upload part %d/%d of %s", n, nparts, o.Name), urls[n], nil, f, off, partLen(o.Size, chunk, n), rep, sent)
			if err != nil {
				return err
			}
			if etag == "" {
				return fmt.Errorf("hub storage: part %d of %s: answer has no ETag", n, o.Name)
			}
			mu.Lock()
			etags[n] = etag
			mu.Unlock()
			return jr.addPart(o.Oid, n, etag)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	parts := make([]map[string]any, nparts)
	for n := 1; n <= nparts; n++ {
		parts[n-1] = map[string]any{"partNumber": n, "etag": etags[n]}
	}
	// The completion URL is presigned: no token (both official clients).
	_, _, err = c.do(ctx, call{op: "complete multipart upload of " + o.Name, method: http.MethodPost, url: up.Href,
		body: jsonBody(map[string]any{"oid": o.Oid, "parts": parts}), contentType: lfsMedia, accept: lfsMedia, auth: false, idempotent: true})
	var he *HubError
	if errors.As(err, &he) && (he.Status == http.StatusNotFound || he.Status == http.StatusForbidden) {
		// Upload gone (completed by an attempt whose answer was lost, or
		// expired): the batch call tells which.
		return &rebatchError{err}
	}
	if errors.As(err, &he) && he.Status == http.StatusBadRequest {
		// Parts rejected (e.g. the storage discarded the upload): forget the
		// journaled parts so the next run starts a clean upload.
		jr.doneUpload(o.Oid)
		return err
	}
	if err != nil {
		return err
	}
	return jr.doneUpload(o.Oid)
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

func partLen(size, chunk int64, n int) int64 {
	off := int64(n-1) * chunk
	return min(chunk, size-off)
}

// uploadIdentity names a multipart upload across batch calls: the uploadId
// query parameter when the Hub sends one, else the URL without its query.
func uploadIdentity(href string) string {
	u, err := url.Parse(href)
	if err != nil {
		return href
	}
	if id := u.Query().Get("uploadId"); id != "" {
		return id
	}
	u.RawQuery = ""
	return u.String()
}

func (c *Client) parallel() int {
	if c.Parallel > 0 {
		return c.Parallel
	}
	return 4
}

// storageClient never follows redirects, so a body and headers are only
// ever sent to the presigned URL itself.
func (c *Client) storageClient() *http.Client {
	cl := *c.client()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error {
		return errors.New("storage redirected; refusing to follow")
	}
	cl.Timeout = 0
	return &cl
}

// putStorage PUTs bytes [off, off+n) of the file to a presigned URL, with
// an explicit Content-Length and without the Hub token, retrying transient
// failures. A stall of RequestTimeout (no body progress, or no answer after
// the body) aborts the attempt.
func (c *Client) putStorage(ctx context.Context, op, href string, hdr map[string]string, f *os.File, off, n int64, rep Reporter, sent *atomic.Int64) (string, error) {
	var etag string
	err := c.Retry.Do(ctx, func(int) error {
		var err error
		etag, err = c.putOnce(ctx, op, href, hdr, f.Name(), off, n, rep, sent)
		return err
	})
	return etag, err
}

// putOnce sends one PUT. The body reads an *os.File of its own, positioned
// at off, so progress and stalls are observed by polling the file offset
// (it advances with every byte handed to the connection) without a wrapper
// on the hot path.
func (c *Client) putOnce(ctx context.Context, op, href string, hdr map[string]string, path string, off, n int64, rep Reporter, sent *atomic.Int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hub %s: %w", op, err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "", fmt.Errorf("hub %s: %w", op, err)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var body io.ReadCloser = io.NopCloser(&io.LimitedReader{R: f, N: n})
	if n == 0 {
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(actx, http.MethodPut, href, body)
	if err != nil {
		return "", fmt.Errorf("hub %s: %w", op, err)
	}
	req.ContentLength = n
	for k, v := range hdr {
		if http.CanonicalHeaderKey(k) == "Authorization" {
			continue
		}
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", c.ua())

	stalled := atomic.Bool{}
	done := make(chan struct{})
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		c.monitor(f, off, n, done, func() { stalled.Store(true); cancel() }, rep, sent)
	}()
	resp, err := c.storageClient().Do(req)
	close(done)
	<-monitorDone
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if stalled.Load() {
			err = fmt.Errorf("hub %s: no progress for %v: %w", op, c.timeout(), context.DeadlineExceeded)
		} else {
			err = fmt.Errorf("hub %s: %w", op, err)
		}
		return "", retry.Transient(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.Header.Get("ETag"), nil
	}
	herr := errorFrom(op, resp, b)
	if resp.StatusCode == http.StatusForbidden {
		return "", &rebatchError{herr}
	}
	if retry.StatusRetryable(resp.StatusCode) {
		return "", retry.After(herr, herr.RetryAfter)
	}
	return "", herr
}

// monitor polls the body file's offset until done: it reports progress and
// calls stall when neither the offset moved nor an answer came for
// RequestTimeout.
func (c *Client) monitor(f *os.File, off, n int64, done <-chan struct{}, stall func(), rep Reporter, sent *atomic.Int64) {
	tick := min(c.timeout()/4, 200*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	last, lastMove := off, time.Now()
	report := func() {
		pos, err := f.Seek(0, io.SeekCurrent)
		if err != nil || pos <= last {
			return
		}
		pos = min(pos, off+n)
		if rep != nil {
			rep.Add(pos - last)
		}
		if sent != nil {
			sent.Add(pos - last)
		}
		last, lastMove = pos, time.Now()
	}
	for {
		select {
		case <-done:
			report()
			return
		case <-t.C:
			report()
			if time.Since(lastMove) > c.timeout() {
				stall()
				return
			}
		}
	}
}
