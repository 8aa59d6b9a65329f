package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/internal/retry"
	"github.com/phonellm/phonellm/pipeline/hfhub"
)

// Client speaks the Hub's publishing API. Fill Endpoint and Token (see
// hfhub.Endpoint and hfhub.Token for the environment defaults).
type Client struct {
	Endpoint  string
	Token     string
	HTTP      *http.Client // nil means a shared client without an overall timeout
	Retry     retry.Policy // zero means retry.Default
	UserAgent string       // default "phonellm"
	// RequestTimeout bounds each API call and the wait for a storage
	// response after its body was sent (default 60 s, the Hub's own limit
	// for commits). Bodies have no overall deadline.
	RequestTimeout time.Duration
	Parallel       int // multipart parts in flight (default 4)
}

// HubError is a non-success answer from the Hub: hfhub.HubError, the one Hub error type of downloads and
// uploads (with Write set by this package's calls).
type HubError = hfhub.HubError

// ConflictError reports a 412: the branch moved since it was read.
type ConflictError struct{ *HubError }

func (e *ConflictError) Unwrap() error { return e.HubError }

// defaultHTTP keeps enough idle connections for parallel part uploads
// (http.DefaultTransport keeps 2 per host, so parts would reconnect).
var defaultHTTP = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: t}
}()

// client is the HTTP client of API calls: c.HTTP (or defaultHTTP) following redirects under the shared
// credential policy, so the token never reaches another origin: net/http's own rule would forward it to
// another port of the Hub's host and to any subdomain (a 307 to another port received it).
func (c *Client) client() *http.Client {
	base := c.HTTP
	if base == nil {
		base = defaultHTTP
	}
	return httpx.WithRedirectPolicy(base)
}

func (c *Client) timeout() time.Duration {
	if c.RequestTimeout > 0 {
		return c.RequestTimeout
	}
	return 60 * time.Second
}

func (c *Client) ua() string {
	if c.UserAgent != "" {
		return c.UserAgent
	}
	return "phonellm"
}

// sameHost reports whether u is on the endpoint's origin (scheme, host and port): the token goes nowhere
// else.
func (c *Client) sameHost(u string) bool { return httpx.SameOriginString(u, c.Endpoint) }

// apiURL joins the endpoint and an already-escaped path.
func (c *Client) apiURL(path string) string {
	return strings.TrimRight(c.Endpoint, "/") + path
}

// call is one API request description.
type call struct {
	op          string
	method, url string
	body        []byte
	contentType string
	accept      string
	auth        bool // send the Hub token (only ever to the endpoint's host)
	idempotent  bool // transient failures may be retried
}

// maxAPIBody bounds any JSON answer read from the Hub; maxErrorBody the body of an error answer.
const (
	maxAPIBody   = 32 << 20
	maxErrorBody = 64 << 10
)

// do performs an API call with retries (idempotent calls only) and returns
// the 2xx response body.
func (c *Client) do(ctx context.Context, k call) (*http.Response, []byte, error) {
	var resp *http.Response
	var body []byte
	err := c.Retry.Do(ctx, func(int) error {
		var err error
		resp, body, err = c.once(ctx, k)
		return err
	})
	return resp, body, err
}

func (c *Client) once(ctx context.Context, k call) (*http.Response, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	var rd io.Reader
	if k.body != nil {
		rd = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(rctx, k.method, k.url, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("hub %s: %w", k.op, err)
	}
	req.Header.Set("User-Agent", c.ua())
	if k.contentType != "" {
		req.Header.Set("Content-Type", k.contentType)
	}
	if k.accept != "" {
		req.Header.Set("Accept", k.accept)
	}
	if k.auth && c.Token != "" && c.sameHost(k.url) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		err = fmt.Errorf("hub %s: %w", k.op, err)
		if k.idempotent && retry.NetworkError(err) {
			return nil, nil, retry.Transient(err)
		}
		return nil, nil, err
	}
	defer resp.Body.Close()
	limit := int64(maxAPIBody)
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		limit = maxErrorBody // only its message is kept, and that is capped
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if rerr == nil && int64(len(body)) > limit {
		rerr = fmt.Errorf("answer larger than %d bytes", limit)
		body = body[:limit]
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if rerr != nil {
			err := fmt.Errorf("hub %s: reading answer: %w", k.op, rerr)
			if k.idempotent && retry.NetworkError(rerr) {
				return nil, nil, retry.Transient(err)
			}
			return resp, nil, err
		}
		return resp, body, nil
	}
	herr := errorFrom(k.op, resp, body)
	if resp.StatusCode == http.StatusPreconditionFailed {
		return resp, body, &ConflictError{herr}
	}
	if k.idempotent && retry.StatusRetryable(resp.StatusCode) {
		return resp, body, retry.After(herr, herr.RetryAfter)
	}
	return resp, body, herr
}

// errorFrom builds the HubError of a publishing call's non-success answer.
func errorFrom(op string, resp *http.Response, body []byte) *HubError {
	e := hfhub.NewHubError(op, "", resp, body)
	e.Write = true
	return e
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // programmer error: only plain structs are marshalled
	}
	return b
}

func decode(op string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("hub %s: unexpected answer: %w", op, err)
	}
	return nil
}

func escRev(rev string) string { return url.PathEscape(rev) }

// WhoAmI returns the token owner's name and organisations.
func (c *Client) WhoAmI(ctx context.Context) (name string, orgs []string, err error) {
	_, body, err := c.do(ctx, call{op: "whoami", method: http.MethodGet, url: c.apiURL("/api/whoami-v2"), auth: true, idempotent: true})
	if err != nil {
		return "", nil, err
	}
	var w struct {
		Name string `json:"name"`
		Orgs []struct {
			Name string `json:"name"`
		} `json:"orgs"`
	}
	if err := decode("whoami", body, &w); err != nil {
		return "", nil, err
	}
	if w.Name == "" {
		return "", nil, errors.New("hub whoami: answer has no name")
	}
	for _, o := range w.Orgs {
		orgs = append(orgs, o.Name)
	}
	return w.Name, orgs, nil
}

// CreateRepo creates a model repo; an existing repo is fine (409). It
// returns the repo URL and whether it was created now.
func (c *Client) CreateRepo(ctx context.Context, repo string, private bool) (string, bool, error) {
	ns, name, _ := strings.Cut(repo, "/")
	vis := "public"
	if private {
		vis = "private"
	}
	_, body, err := c.do(ctx, call{op: "create repo " + repo, method: http.MethodPost, url: c.apiURL("/api/repos/create"),
		body:        jsonBody(map[string]any{"name": name, "organization": ns, "type": "model", "visibility": vis, "private": private}),
		contentType: "application/json", auth: true, idempotent: true})
	var he *HubError
	if errors.As(err, &he) && he.Status == http.StatusConflict {
		return strings.TrimRight(c.Endpoint, "/") + "/" + repo, false, nil
	}
	if err != nil {
		return "", false, err
	}
	var out struct {
		URL string `json:"url"`
	}
	if err := decode("create repo", body, &out); err != nil {
		return "", false, err
	}
	return out.URL, true, nil
}

// Revision returns the commit a revision points at.
func (c *Client) Revision(ctx context.Context, repo, rev string) (string, error) {
	_, body, err := c.do(ctx, call{op: "revision " + rev, method: http.MethodGet,
		url: c.apiURL("/api/models/" + repo + "/revision/" + escRev(rev)), auth: true, idempotent: true})
	if err != nil {
		return "", err
	}
	var out struct {
		Sha string `json:"sha"`
	}
	if err := decode("revision", body, &out); err != nil {
		return "", err
	}
	if len(out.Sha) != 40 {
		return "", fmt.Errorf("hub revision %s: sha %q is not a commit id", rev, out.Sha)
	}
	return out.Sha, nil
}

// TreeEntry is one file of a revision.
type TreeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	Oid  string `json:"oid"` // git blob id (of the pointer for LFS files)
	LFS  *struct {
		Oid  string `json:"oid"` // sha256
		Size int64  `json:"size"`
	} `json:"lfs,omitempty"`
}

// ListFiles lists every file of a revision (recursive tree), following Link
// pagination.
func (c *Client) ListFiles(ctx context.Context, repo, rev string) ([]TreeEntry, error) {
	next := c.apiURL("/api/models/" + repo + "/tree/" + escRev(rev) + "?recursive=true&expand=false")
	var all []TreeEntry
	for page := 0; next != ""; page++ {
		if page > 10000 {
			return nil, errors.New("hub tree: too many pages")
		}
		resp, body, err := c.do(ctx, call{op: "list files", method: http.MethodGet, url: next, accept: "application/json", auth: true, idempotent: true})
		if err != nil {
			return nil, err
		}
		var items []TreeEntry
		if err := decode("list files", body, &items); err != nil {
			return nil, err
		}
		for _, it := range items {
			if it.Type == "file" {
				all = append(all, it)
			}
		}
		next = hfhub.NextLink(resp.Header.Get("Link"))
	}
	return all, nil
}

// PreuploadFile is one file announced to preupload.
type PreuploadFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Sample string `json:"sample"` // base64 of the first 512 bytes
}

// PreuploadResult is the Hub's decision per file.
type PreuploadResult struct {
	CommitOid string `json:"commitOid"`
	Files     []struct {
		Path         string `json:"path"`
		UploadMode   string `json:"uploadMode"` // "lfs" or "regular"
		ShouldIgnore bool   `json:"shouldIgnore"`
		Oid          string `json:"oid"` // remote blob id when the path exists
	} `json:"files"`
}

// Preupload asks which files go through LFS (batches of ≤ 256 paths).
func (c *Client) Preupload(ctx context.Context, repo, rev string, files []PreuploadFile) (PreuploadResult, error) {
	var all PreuploadResult
	for start := 0; start < len(files); start += 256 {
		chunk := files[start:min(start+256, len(files))]
		_, body, err := c.do(ctx, call{op: "preupload", method: http.MethodPost,
			url:  c.apiURL("/api/models/" + repo + "/preupload/" + escRev(rev)),
			body: jsonBody(map[string]any{"files": chunk}), contentType: "application/json", auth: true, idempotent: true})
		if err != nil {
			return all, err
		}
		var r PreuploadResult
		if err := decode("preupload", body, &r); err != nil {
			return all, err
		}
		all.CommitOid = r.CommitOid
		all.Files = append(all.Files, r.Files...)
	}
	return all, nil
}

// CreateBranch creates branch from startingPoint (a branch or commit; ""
// means the default branch). An existing branch is fine (409).
func (c *Client) CreateBranch(ctx context.Context, repo, branch, startingPoint string) error {
	body := map[string]any{}
	if startingPoint != "" {
		body["startingPoint"] = startingPoint
	}
	_, _, err := c.do(ctx, call{op: "create branch " + branch, method: http.MethodPost,
		url:  c.apiURL("/api/models/" + repo + "/branch/" + escRev(branch)),
		body: jsonBody(body), contentType: "application/json", auth: true, idempotent: true})
	var he *HubError
	if errors.As(err, &he) && he.Status == http.StatusConflict {
		return nil
	}
	return err
}
