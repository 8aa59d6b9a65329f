package hfhub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/internal/retry"
)

// RepoFile is one file of a revision, from the tree API.
type RepoFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // LFS files only
}

// maxTreePage bounds one JSON page of the tree API.
const maxTreePage = 32 << 20

// Commit resolves a revision (branch, tag or commit) to its commit id.
func (c *Client) Commit(ctx context.Context, repo, revision string) (string, error) {
	if err := ValidateRepoID(repo); err != nil {
		return "", err
	}
	if revision == "" {
		revision = "main"
	}
	var out struct {
		Sha string `json:"sha"`
	}
	u := strings.TrimRight(c.Endpoint, "/") + "/api/models/" + repo + "/revision/" + url.PathEscape(revision)
	if _, err := c.getJSON(ctx, "revision", u, &out); err != nil {
		return "", err
	}
	if !hex40.MatchString(out.Sha) {
		return "", fmt.Errorf("hfhub: revision %s of %s: sha %q is not a commit id", revision, repo, out.Sha)
	}
	return out.Sha, nil
}

// ListFiles lists every file of a revision (recursive tree, Link pages).
func (c *Client) ListFiles(ctx context.Context, repo, revision string) ([]RepoFile, error) {
	if err := ValidateRepoID(repo); err != nil {
		return nil, err
	}
	if revision == "" {
		revision = "main"
	}
	next := strings.TrimRight(c.Endpoint, "/") + "/api/models/" + repo + "/tree/" + url.PathEscape(revision) + "?recursive=true"
	var files []RepoFile
	for page := 0; next != ""; page++ {
		if page >= 10000 {
			return nil, errors.New("hfhub: tree: too many pages")
		}
		var items []struct {
			Type string `json:"type"`
			Path string `json:"path"`
			Size int64  `json:"size"`
			LFS  *struct {
				Oid string `json:"oid"`
			} `json:"lfs"`
		}
		h, err := c.getJSON(ctx, "tree", next, &items)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if it.Type != "file" {
				continue
			}
			if ValidatePath(it.Path) != nil || it.Size < 0 {
				return nil, fmt.Errorf("hfhub: tree of %s: bad entry %q (size %d)", repo, it.Path, it.Size)
			}
			f := RepoFile{Path: it.Path, Size: it.Size}
			if it.LFS != nil {
				f.SHA256 = it.LFS.Oid
			}
			files = append(files, f)
		}
		next = NextLink(h.Get("Link"))
	}
	return files, nil
}

// Snapshot downloads the files of a revision that match (all when match is
// nil) into the cache, pinned to one commit so a branch moving meanwhile
// cannot mix versions. It returns the snapshot folder
// (snapshots/<commit>) and the files, each verified.
func (c *Client) Snapshot(ctx context.Context, repo, revision string, match func(path string) bool, progress func(n int64)) (string, []Local, error) {
	commit, err := c.Commit(ctx, repo, revision)
	if err != nil {
		return "", nil, err
	}
	files, err := c.ListFiles(ctx, repo, commit)
	if err != nil {
		return "", nil, err
	}
	var out []Local
	for _, f := range files {
		if match != nil && !match(f.Path) {
			continue
		}
		loc, err := c.Download(ctx, repo, commit, f.Path, progress)
		if err != nil {
			return "", out, err
		}
		if loc.Info.Size != f.Size || f.SHA256 != "" && loc.Info.SHA256 != f.SHA256 {
			return "", out, fmt.Errorf("hfhub: %s/%s: resolve says %d bytes %s, tree says %d bytes %s", repo, f.Path, loc.Info.Size, loc.Info.ETag(), f.Size, f.SHA256)
		}
		out = append(out, loc)
	}
	if revision != "" && revision != commit {
		if err := writeRef(filepath.Join(c.CacheDir, RepoFolderName(repo)), revision, commit); err != nil {
			return "", out, err
		}
	}
	return filepath.Join(c.CacheDir, RepoFolderName(repo), "snapshots", commit), out, nil
}

// getJSON GETs a Hub API URL (token sent to the Hub only) with retries and
// decodes a bounded JSON answer.
func (c *Client) getJSON(ctx context.Context, op, u string, v any) (http.Header, error) {
	var hdr http.Header
	err := c.Retry.Do(ctx, func(int) error {
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", c.userAgent())
		pu, _ := url.Parse(u)
		if c.Token != "" && pu != nil && c.sameHost(pu) {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := c.following().Do(req)
		if err != nil {
			if ctx.Err() == nil && retry.NetworkError(err) {
				return retry.Transient(fmt.Errorf("hfhub: %s %s: %w", op, redact(u), err))
			}
			return fmt.Errorf("hfhub: %s %s: %w", op, redact(u), err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return c.statusError(op, u, resp)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxTreePage+1))
		if err != nil {
			return retry.Transient(fmt.Errorf("hfhub: %s: reading answer: %w", op, err))
		}
		if len(body) > maxTreePage {
			return fmt.Errorf("hfhub: %s: answer larger than %d bytes", op, maxTreePage)
		}
		if err := json.Unmarshal(body, v); err != nil {
			return fmt.Errorf("hfhub: %s: unexpected answer: %w", op, err)
		}
		hdr = resp.Header
		return nil
	})
	return hdr, err
}

// NextLink extracts the rel="next" URL of a Link header (the Hub's pagination), or "".
func NextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		u, params, ok := strings.Cut(part, ";")
		if ok && strings.Contains(params, `rel="next"`) {
			return strings.Trim(strings.TrimSpace(u), "<>")
		}
	}
	return ""
}
