package hfhub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/internal/retry"
)

// Client downloads files from a Hub. The zero value is not usable; build one
// with New (environment) or fill the fields.
type Client struct {
	Endpoint  string       // Hub base URL, e.g. https://huggingface.co
	Token     string       // bearer token, sent to Endpoint's host only
	CacheDir  string       // hub cache root ($HF_HUB_CACHE)
	HTTP      *http.Client // nil means a client without an overall timeout
	Retry     retry.Policy // zero value means retry.Default
	UserAgent string       // default "phonellm"
	// TrustVerified skips re-hashing a cached blob that this package fully
	// verified before and whose size and modification time are unchanged
	// (a marker under CacheDir/.phonellm-verified). Off by default: every
	// call then re-hashes the cached blob.
	TrustVerified bool
	// RequestTimeout bounds a metadata request and the wait for the first
	// response byte of a download (0 means 60 s). Bodies have no overall
	// deadline: a multi-GB download takes as long as it takes.
	RequestTimeout time.Duration
}

// New returns a Client configured from HF_ENDPOINT, HF_TOKEN/token file and
// HF_HUB_CACHE/HF_HOME.
func New() *Client {
	return &Client{Endpoint: Endpoint(), Token: Token(), CacheDir: CacheDir()}
}

// FileInfo is what the Hub says about one file at one revision.
type FileInfo struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Commit   string `json:"commit"` // X-Repo-Commit: the commit the revision resolved to
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	// SHA256 is set for LFS files (X-Linked-Etag); GitSHA1 for regular files
	// (ETag, the git blob id). Exactly one is set.
	SHA256  string `json:"sha256,omitempty"`
	GitSHA1 string `json:"git_sha1,omitempty"`
	// URL is where the bytes are fetched: the CDN location of an LFS file
	// (no token sent there), or the resolve URL itself.
	URL string `json:"-"`
}

// ETag is the blob id used as the cache blob name.
func (f FileInfo) ETag() string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.GitSHA1
}

// IntegrityError means bytes did not match the size or hash the Hub
// announced.
type IntegrityError struct {
	Path       string
	Want, Got  string
	WantSize   int64
	GotSize    int64
	SizeFailed bool
}

func (e *IntegrityError) Error() string {
	if e.SizeFailed {
		return fmt.Sprintf("hfhub: %s: size %d, want %d", e.Path, e.GotSize, e.WantSize)
	}
	return fmt.Sprintf("hfhub: %s: hash %s, want %s", e.Path, e.Got, e.Want)
}

// RemoteError classifies the error (pipeline.IsRemoteError): what the Hub or its CDN sent was not what it announced.
func (e *IntegrityError) RemoteError() bool { return true }

// redact drops the query (signatures) from a URL for error messages.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

var (
	hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// normalizeETag strips a weak prefix and quotes, lowercases.
func normalizeETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.ToLower(strings.Trim(s, `"`))
}

func (c *Client) userAgent() string {
	if c.UserAgent != "" {
		return c.UserAgent
	}
	return "phonellm"
}

func (c *Client) timeout() time.Duration {
	if c.RequestTimeout > 0 {
		return c.RequestTimeout
	}
	return 60 * time.Second
}

// noRedirect is c.HTTP with every redirect returned to the caller, which decides per hop whether the token
// may follow (resolve: a same-origin hop is followed, another origin is where the bytes are).
func (c *Client) noRedirect() *http.Client { return httpx.WithoutRedirects(c.HTTP) }

// following is c.HTTP following redirects under the shared credential policy (httpx.CheckRedirect: the
// token is dropped once a redirect leaves the Hub's origin), without an overall timeout.
func (c *Client) following() *http.Client {
	cl := httpx.WithRedirectPolicy(c.HTTP)
	cl.Timeout = 0
	return cl
}

// sameHost reports whether u is on the endpoint's origin (scheme, host and port), the only place the token
// may be sent.
func (c *Client) sameHost(u *url.URL) bool {
	e, err := url.Parse(c.Endpoint)
	return err == nil && httpx.SameOrigin(e, u)
}

// Stat resolves one file: HEAD on the resolve URL without following a
// redirect to another host, reading X-Repo-Commit, X-Linked-Etag/ETag,
// X-Linked-Size/Content-Length and Location. Transient failures are retried.
func (c *Client) Stat(ctx context.Context, repo, revision, file string) (FileInfo, error) {
	if err := ValidateRepoID(repo); err != nil {
		return FileInfo{}, err
	}
	if err := ValidatePath(file); err != nil {
		return FileInfo{}, err
	}
	if revision == "" {
		revision = "main"
	}
	var info FileInfo
	err := c.Retry.Do(ctx, func(int) error {
		var err error
		info, err = c.statOnce(ctx, repo, revision, file)
		return err
	})
	return info, err
}

func (c *Client) statOnce(ctx context.Context, repo, revision, file string) (FileInfo, error) {
	target := ResolveURL(c.Endpoint, repo, revision, file)
	hc := c.noRedirect()
	for hop := 0; hop < 5; hop++ {
		u, err := url.Parse(target)
		if err != nil {
			return FileInfo{}, fmt.Errorf("hfhub: resolve %s: %w", target, err)
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		req, err := http.NewRequestWithContext(rctx, http.MethodHead, target, nil)
		if err != nil {
			cancel()
			return FileInfo{}, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		req.Header.Set("User-Agent", c.userAgent())
		if c.Token != "" && c.sameHost(u) {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := hc.Do(req)
		cancel()
		if err != nil {
			if ctx.Err() == nil && retry.NetworkError(err) {
				return FileInfo{}, retry.Transient(fmt.Errorf("hfhub: resolve %s: %w", redact(target), err))
			}
			return FileInfo{}, fmt.Errorf("hfhub: resolve %s: %w", redact(target), err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			loc, err := u.Parse(resp.Header.Get("Location"))
			if err != nil || resp.Header.Get("Location") == "" {
				return FileInfo{}, fmt.Errorf("hfhub: resolve %s: %d without a valid Location", redact(target), resp.StatusCode)
			}
			if c.sameHost(loc) && resp.Header.Get("X-Linked-Etag") == "" {
				// Relative/same-host redirect (e.g. /api/resolve-cache/…): follow it.
				target = loc.String()
				continue
			}
			return c.infoFrom(resp, repo, revision, file, loc.String())
		}
		if resp.StatusCode != http.StatusOK {
			return FileInfo{}, c.statusError("resolve", target, resp)
		}
		return c.infoFrom(resp, repo, revision, file, target)
	}
	return FileInfo{}, fmt.Errorf("hfhub: resolve %s: too many same-host redirects", redact(target))
}

func (c *Client) statusError(op, target string, resp *http.Response) error {
	var body []byte
	if resp.Request == nil || resp.Request.Method != http.MethodHead {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	}
	herr := NewHubError(op, target, resp, body)
	if retry.StatusRetryable(resp.StatusCode) {
		return retry.After(herr, herr.RetryAfter)
	}
	return herr
}

func (c *Client) infoFrom(resp *http.Response, repo, revision, file, fetchURL string) (FileInfo, error) {
	info := FileInfo{Repo: repo, Revision: revision, Path: file, URL: fetchURL}
	info.Commit = strings.TrimSpace(resp.Header.Get("X-Repo-Commit"))
	if !hex40.MatchString(info.Commit) {
		return FileInfo{}, fmt.Errorf("hfhub: resolve %s/%s@%s: X-Repo-Commit %q is not a 40-hex commit id (not a Hub?)", repo, file, revision, info.Commit)
	}
	sizeHdr := resp.Header.Get("X-Linked-Size")
	if linked := resp.Header.Get("X-Linked-Etag"); linked != "" {
		info.SHA256 = normalizeETag(linked)
		if !hex64.MatchString(info.SHA256) {
			return FileInfo{}, fmt.Errorf("hfhub: resolve %s/%s: X-Linked-Etag %q is not a sha256", repo, file, linked)
		}
	} else {
		info.GitSHA1 = normalizeETag(resp.Header.Get("ETag"))
		if !hex40.MatchString(info.GitSHA1) {
			if hex64.MatchString(info.GitSHA1) {
				info.SHA256, info.GitSHA1 = info.GitSHA1, ""
			} else {
				return FileInfo{}, fmt.Errorf("hfhub: resolve %s/%s: ETag %q is neither a git blob id nor a sha256", repo, file, resp.Header.Get("ETag"))
			}
		}
		if sizeHdr == "" {
			sizeHdr = resp.Header.Get("Content-Length")
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(sizeHdr), 10, 64)
	if err != nil || n < 0 {
		return FileInfo{}, fmt.Errorf("hfhub: resolve %s/%s: size header %q: want a non-negative integer", repo, file, sizeHdr)
	}
	info.Size = n
	return info, nil
}

var errRangeIgnored = errors.New("server ignored Range")
