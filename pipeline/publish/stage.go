package publish

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/phonellm/phonellm/pipeline"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/phonellm/phonellm/internal/retry"
	"github.com/phonellm/phonellm/pipeline/hfhub"
)

// File is one file to publish: a local file, or in-memory Content.
type File struct {
	Local   string `json:"local,omitempty"`
	Path    string `json:"path"` // path in the repo; default base name of Local
	Content []byte `json:"-"`
}

// Options configures Run. Zero values are usable except Repo and Files.
type Options struct {
	Repo        string // "org/name", or "name" for the token owner's namespace
	Revision    string // branch (default "main")
	Private     bool   // visibility when the repo is created
	Files       []File
	Card        *Card  // rendered to README.md when set
	Message     string // commit summary (default "Upload <n> files with phonellm")
	Description string
	CreatePR    bool
	DryRun      bool // hash and plan only; no network

	Endpoint   string // default HF_ENDPOINT or https://huggingface.co
	Token      string // default HF_TOKEN or $HF_HOME/token
	JournalDir string // default $HF_HOME/phonellm

	HTTPClient     *http.Client
	Retry          retry.Policy
	RequestTimeout time.Duration
	Parallel       int
}

// Validate checks the options without touching the network.
func (o Options) Validate() error {
	if o.Repo == "" {
		return errors.New("publish: no repo given (--repo org/name)")
	}
	if strings.Contains(o.Repo, "/") {
		if err := hfhub.ValidateRepoID(o.Repo); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	} else if err := hfhub.ValidateRepoID("x/" + o.Repo); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if len(o.Files) == 0 && o.Card == nil {
		return errors.New("publish: nothing to publish")
	}
	seen := map[string]bool{}
	for _, f := range o.Files {
		p := f.repoPath()
		if err := hfhub.ValidatePath(p); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		if f.Local == "" && f.Content == nil {
			return fmt.Errorf("publish: %s: neither a local file nor content", p)
		}
		if seen[p] {
			return fmt.Errorf("publish: %s given twice", p)
		}
		seen[p] = true
	}
	if o.Card != nil && seen["README.md"] {
		return errors.New("publish: README.md given both as a file and as the generated card")
	}
	return nil
}

func (f File) repoPath() string {
	if f.Path != "" {
		return f.Path
	}
	return filepath.Base(f.Local)
}

// Result lists what was published.
type Result struct {
	Repo           string       `json:"repo"`
	Revision       string       `json:"revision"`
	RepoURL        string       `json:"repo_url,omitempty"`
	CommitOid      string       `json:"commit,omitempty"`
	CommitURL      string       `json:"commit_url,omitempty"`
	PullRequestURL string       `json:"pull_request_url,omitempty"`
	Files          []FileResult `json:"files"`
	DryRun         bool         `json:"dry_run,omitempty"`
	UpToDate       bool         `json:"up_to_date,omitempty"` // nothing changed: no commit made
	Verified       bool         `json:"verified"`             // the revision's file list matched size+sha256
	BytesHashed    int64        `json:"bytes_hashed"`
	BytesSent      int64        `json:"bytes_sent"`
}

// FileResult is one published file.
type FileResult struct {
	Path       string `json:"path"`
	Local      string `json:"local,omitempty"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
	LFS        bool   `json:"lfs"`
	Action     string `json:"action"` // "upload", "commit", "unchanged", "planned"
	ResolveURL string `json:"resolve_url,omitempty"`
}

type planned struct {
	File
	size    int64
	sha256  string
	gitSHA1 string // regular files
	lfs     bool
	ignored bool // the Hub's preupload said shouldIgnore
	sample  []byte
}

// Run publishes the files: hash, create repo, preupload, upload LFS objects,
// commit on top of the branch head, and verify the new revision.
func Run(ctx context.Context, opts Options, rep Reporter) (res Result, err error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	if opts.Revision == "" {
		opts.Revision = "main"
	}
	if opts.Endpoint == "" {
		opts.Endpoint = hfhub.Endpoint()
	}
	opts.Endpoint = strings.TrimRight(opts.Endpoint, "/")
	if opts.Token == "" {
		opts.Token = hfhub.Token()
	}
	if opts.JournalDir == "" {
		opts.JournalDir = filepath.Join(hfhub.Home(), "phonellm")
	}
	files := append([]File(nil), opts.Files...)
	if opts.Card != nil {
		card, err := opts.Card.Render()
		if err != nil {
			return Result{}, err
		}
		files = append(files, File{Path: "README.md", Content: card})
	}
	res = Result{Repo: opts.Repo, Revision: opts.Revision, DryRun: opts.DryRun}

	c := &Client{Endpoint: opts.Endpoint, Token: opts.Token, HTTP: opts.HTTPClient, Retry: opts.Retry,
		RequestTimeout: opts.RequestTimeout, Parallel: opts.Parallel}
	if !opts.DryRun {
		if opts.Token == "" {
			return res, &HubError{Op: "auth", Status: http.StatusUnauthorized, Message: "no Hub token: set HF_TOKEN or create $HF_HOME/token", Write: true}
		}
		if !strings.Contains(opts.Repo, "/") {
			name, _, err := c.WhoAmI(ctx)
			if err != nil {
				return res, err
			}
			opts.Repo = name + "/" + opts.Repo
			res.Repo = opts.Repo
		}
	}
	jr := openJournal(journalPath(opts.JournalDir, opts.Endpoint, opts.Repo, opts.Revision), opts.Repo, opts.Revision)

	// 1. Hash every file once (or take the hash from the journal).
	plan, hashed, err := hashAll(ctx, files, jr, rep)
	res.BytesHashed = hashed
	if err != nil {
		return res, err
	}
	for _, p := range plan {
		res.Files = append(res.Files, FileResult{Path: p.repoPath(), Local: p.Local, Size: p.size, SHA256: p.sha256, LFS: p.lfs, Action: "planned"})
	}
	if opts.DryRun {
		return res, nil
	}

	// 2. Repo and branch head.
	res.RepoURL, _, err = c.CreateRepo(ctx, opts.Repo, opts.Private)
	if err != nil {
		return res, err
	}
	parent, err := c.Revision(ctx, opts.Repo, opts.Revision)
	var he *HubError
	if errors.As(err, &he) && he.Code == "RevisionNotFound" && opts.Revision != "main" && !strings.HasPrefix(opts.Revision, "refs/") {
		// A new branch, started from main (huggingface_hub create_branch).
		rep.Note(pipeline.Info, fmt.Sprintf("creating branch %s from main", opts.Revision))
		if err = c.CreateBranch(ctx, opts.Repo, opts.Revision, ""); err == nil {
			parent, err = c.Revision(ctx, opts.Repo, opts.Revision)
		}
	}
	if err != nil {
		return res, fmt.Errorf("publish: reading %s@%s: %w", opts.Repo, opts.Revision, err)
	}

	// 3. Preupload: LFS or regular, and what the Hub already has.
	pre := make([]PreuploadFile, len(plan))
	for i, p := range plan {
		pre[i] = PreuploadFile{Path: p.repoPath(), Size: p.size, Sample: base64.StdEncoding.EncodeToString(p.sample)}
	}
	modes, err := c.Preupload(ctx, opts.Repo, opts.Revision, pre)
	if err != nil {
		return res, err
	}
	byPath := map[string]int{}
	for i, p := range plan {
		byPath[p.repoPath()] = i
	}
	answered := map[string]bool{}
	var ops []CommitOp
	var objs []localObject
	seenOid := map[string]bool{}
	var regularBytes int64
	for _, m := range modes.Files {
		i, ok := byPath[m.Path]
		if !ok || answered[m.Path] {
			return res, fmt.Errorf("hub preupload: answer names %q, not asked for (or twice)", m.Path)
		}
		answered[m.Path] = true
		p := &plan[i]
		fr := &res.Files[i]
		if m.ShouldIgnore {
			p.ignored = true
			fr.Action = "ignored"
			rep.Note(pipeline.Warn, fmt.Sprintf("%s: the Hub ignores this path (.gitignore)", m.Path))
			continue
		}
		switch m.UploadMode {
		case "lfs":
			p.lfs = true
		case "regular":
			p.lfs = false
		default:
			return res, fmt.Errorf("hub preupload: %s: upload mode %q", m.Path, m.UploadMode)
		}
		fr.LFS = p.lfs
		if m.Oid != "" && (p.lfs && m.Oid == p.sha256 || !p.lfs && m.Oid == p.gitSHA1) {
			fr.Action = "unchanged"
			continue
		}
		if p.lfs {
			fr.Action = "upload"
			ops = append(ops, CommitOp{Key: "lfsFile", Path: m.Path, Oid: p.sha256, Size: p.size})
			if !seenOid[p.sha256] {
				seenOid[p.sha256] = true
				objs = append(objs, localObject{Local: p.Local, Name: m.Path, Oid: p.sha256, Size: p.size})
			}
			continue
		}
		fr.Action = "commit"
		content, err := p.content()
		if err != nil {
			return res, err
		}
		regularBytes += int64(len(content))
		ops = append(ops, CommitOp{Key: "file", Path: m.Path, Content: content})
	}
	if len(answered) != len(plan) {
		return res, fmt.Errorf("hub preupload: answer covers %d of %d files", len(answered), len(plan))
	}
	if len(ops) == 0 {
		res.UpToDate, res.CommitOid = true, parent
		return finish(ctx, c, opts, plan, &res, jr, rep)
	}

	// 4. LFS objects.
	var sent atomic.Int64
	var total int64
	for _, o := range objs {
		total += o.Size
	}
	if len(objs) > 0 {
		rep.Begin("upload", total)
		err = c.uploadLFS(ctx, opts.Repo, opts.Revision, objs, jr, rep, &sent)
		rep.End("upload", err)
		res.BytesSent = sent.Load()
		if err != nil {
			return res, err
		}
	}
	res.BytesSent += regularBytes

	// 5. Commit on top of the head read above.
	summary := opts.Message
	if summary == "" {
		summary = fmt.Sprintf("Upload %d file(s) with phonellm", len(ops))
	}
	rep.Begin("commit", 0)
	info, err := commitOnce(ctx, c, opts, summary, parent, ops, plan, rep)
	rep.End("commit", err)
	if err != nil {
		return res, err
	}
	res.CommitOid, res.CommitURL, res.PullRequestURL = info.Oid, info.URL, info.PullRequestURL
	return finish(ctx, c, opts, plan, &res, jr, rep)
}

// commitOnce sends the commit and resolves an ambiguous failure by reading
// the branch head: unchanged → the commit did not land, send it again (the
// parentCommit guard makes a duplicate impossible); moved to a revision whose
// files are ours → it landed; moved elsewhere → someone else committed.
func commitOnce(ctx context.Context, c *Client, opts Options, summary, parent string, ops []CommitOp, plan []planned, rep Reporter) (CommitInfo, error) {
	var info CommitInfo
	err := c.Retry.Do(ctx, func(attempt int) error {
		var err error
		info, err = c.Commit(ctx, opts.Repo, opts.Revision, summary, opts.Description, parent, ops, opts.CreatePR)
		if err == nil {
			return nil
		}
		var ce *ConflictError
		if errors.As(err, &ce) {
			return err
		}
		var he *HubError
		if errors.As(err, &he) {
			if he.Status == http.StatusTooManyRequests {
				// Refused before it was processed: safe to send again.
				return retry.After(err, he.RetryAfter)
			}
			if he.Status < 500 && he.Status != http.StatusRequestTimeout {
				return err // a clear refusal: nothing was committed
			}
		} else if !retry.NetworkError(err) {
			return err
		}
		// Outcome unknown.
		if opts.CreatePR {
			return fmt.Errorf("publish: commit outcome unknown (pull request mode, not retried): %w", err)
		}
		head, herr := c.Revision(ctx, opts.Repo, opts.Revision)
		if herr != nil {
			return fmt.Errorf("publish: commit outcome unknown: %w; reading the branch head also failed: %v", err, herr)
		}
		if head == parent {
			rep.Note(pipeline.Warn, fmt.Sprintf("commit attempt %d failed (%v); the branch did not move, sending it again", attempt, err))
			return retry.Transient(err)
		}
		entries, lerr := c.ListFiles(ctx, opts.Repo, head)
		if lerr == nil && compareTree(entries, plan) == nil {
			rep.Note(pipeline.Warn, fmt.Sprintf("commit answer was lost (%v) but the branch now holds it at %s", err, head[:12]))
			info = CommitInfo{Oid: head, URL: opts.Endpoint + "/" + opts.Repo + "/commit/" + head}
			return nil
		}
		return fmt.Errorf("publish: commit failed (%w) and %s moved to %s, which is not this upload; run publish again", err, opts.Revision, head)
	})
	return info, err
}

// finish lists the committed revision, checks every file, clears the journal
// and fills the resolve URLs ship uses.
func finish(ctx context.Context, c *Client, opts Options, plan []planned, res *Result, jr *journal, rep Reporter) (Result, error) {
	rep.Begin("verify", 0)
	entries, err := c.ListFiles(ctx, opts.Repo, res.CommitOid)
	if err != nil {
		err = &UnverifiedError{Commit: res.CommitOid, Err: err}
	} else {
		err = compareTree(entries, plan)
	}
	rep.End("verify", err)
	if err != nil {
		return *res, fmt.Errorf("publish: verifying %s@%s: %w", opts.Repo, res.CommitOid, err)
	}
	res.Verified = true
	if res.CommitURL == "" {
		res.CommitURL = opts.Endpoint + "/" + opts.Repo + "/commit/" + res.CommitOid
	}
	for i := range res.Files {
		if res.Files[i].Action != "ignored" {
			res.Files[i].ResolveURL = hfhub.ResolveURL(opts.Endpoint, opts.Repo, res.CommitOid, res.Files[i].Path)
		}
	}
	if err := jr.remove(); err != nil {
		rep.Note(pipeline.Warn, "could not remove the upload journal: "+err.Error())
	}
	return *res, nil
}

// UnverifiedError means the commit landed but its file list could not be
// read to check it; running publish again verifies it (and uploads nothing).
type UnverifiedError struct {
	Commit string
	Err    error
}

func (e *UnverifiedError) Error() string {
	return "committed " + e.Commit + " but could not list it to verify: " + e.Err.Error()
}

func (e *UnverifiedError) Unwrap() error { return e.Err }

// RemoteError classifies the error (pipeline.IsRemoteError): the Hub refused or failed.
func (e *UnverifiedError) RemoteError() bool { return true }

// VerifyError lists files whose committed size or hash is not what was
// uploaded.
type VerifyError struct{ Problems []string }

func (e *VerifyError) Error() string {
	return "the Hub's file list does not match the upload: " + strings.Join(e.Problems, "; ")
}

// RemoteError classifies the error (pipeline.IsRemoteError): the Hub refused or failed.
func (e *VerifyError) RemoteError() bool { return true }

func compareTree(entries []TreeEntry, plan []planned) error {
	byPath := map[string]TreeEntry{}
	for _, e := range entries {
		byPath[e.Path] = e
	}
	var probs []string
	for _, p := range plan {
		if p.ignored {
			continue
		}
		name := p.repoPath()
		e, ok := byPath[name]
		switch {
		case !ok:
			probs = append(probs, name+": missing")
		case e.Size != p.size:
			probs = append(probs, fmt.Sprintf("%s: size %d, want %d", name, e.Size, p.size))
		case p.lfs && (e.LFS == nil || e.LFS.Oid != p.sha256 || e.LFS.Size != p.size):
			probs = append(probs, fmt.Sprintf("%s: LFS object %v, want sha256 %s", name, e.LFS, p.sha256))
		case !p.lfs && e.LFS == nil && e.Oid != p.gitSHA1:
			probs = append(probs, fmt.Sprintf("%s: git blob %s, want %s", name, e.Oid, p.gitSHA1))
		case !p.lfs && e.LFS != nil && e.LFS.Oid != p.sha256:
			probs = append(probs, fmt.Sprintf("%s: stored as LFS %s, want sha256 %s", name, e.LFS.Oid, p.sha256))
		}
	}
	if len(probs) > 0 {
		return &VerifyError{probs}
	}
	return nil
}

// maxRegular bounds a file sent inline in the commit (the Hub's 10 MiB
// regular-file limit).
const maxRegular = 10 << 20

func (p *planned) content() ([]byte, error) {
	if p.Content != nil {
		return p.Content, nil
	}
	if p.size > maxRegular {
		return nil, fmt.Errorf("publish: %s: the Hub wants it as a regular file but it has %d bytes (limit %d)", p.Local, p.size, maxRegular)
	}
	b, err := os.ReadFile(p.Local)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	if int64(len(b)) != p.size || gitBlobSHA1(b) != p.gitSHA1 {
		return nil, fmt.Errorf("publish: %s changed since it was hashed", p.Local)
	}
	return b, nil
}

// hashAll computes sha256 (and the git blob id for small files) of every
// file, reading each once; unchanged files take their hash from the journal.
func hashAll(ctx context.Context, files []File, jr *journal, rep Reporter) ([]planned, int64, error) {
	plan := make([]planned, len(files))
	var total int64
	for i, f := range files {
		plan[i].File = f
		if f.Content != nil {
			plan[i].size = int64(len(f.Content))
			continue
		}
		st, err := os.Stat(f.Local)
		if err != nil {
			return nil, 0, fmt.Errorf("publish: %w", err)
		}
		if !st.Mode().IsRegular() {
			return nil, 0, fmt.Errorf("publish: %s is not a regular file", f.Local)
		}
		plan[i].size = st.Size()
		total += st.Size()
	}
	rep.Begin("hash", total)
	var hashed int64
	var err error
	for i := range plan {
		p := &plan[i]
		p.lfs = guessLFS(p.repoPath(), p.size)
		if p.Content != nil {
			s := sha256.Sum256(p.Content)
			p.sha256, p.gitSHA1 = hex.EncodeToString(s[:]), gitBlobSHA1(p.Content)
			p.sample = p.Content[:min(512, len(p.Content))]
			continue
		}
		if err = hashLocal(ctx, p, jr, rep, &hashed); err != nil {
			break
		}
	}
	rep.End("hash", err)
	return plan, hashed, err
}

func hashLocal(ctx context.Context, p *planned, jr *journal, rep Reporter, hashed *int64) error {
	abs, err := filepath.Abs(p.Local)
	if err != nil {
		return err
	}
	f, err := os.Open(abs)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	p.sample = make([]byte, min(512, st.Size()))
	if _, err := io.ReadFull(f, p.sample); err != nil {
		return fmt.Errorf("publish: %s: %w", p.Local, err)
	}
	small := st.Size() <= maxRegular
	if jh, ok := jr.hash(abs, st.Size(), st.ModTime().UnixNano()); ok && (jh.GitSHA1 != "" || !small) {
		p.sha256, p.gitSHA1 = jh.SHA256, jh.GitSHA1
		rep.Add(st.Size())
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	var g io.Writer = io.Discard
	var gitHash *gitHasher
	if small {
		gitHash = newGitHasher(st.Size())
		g = gitHash
	}
	buf := make([]byte, 4<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, rerr := f.Read(buf)
		if k > 0 {
			h.Write(buf[:k])
			g.Write(buf[:k])
			n += int64(k)
			*hashed += int64(k)
			rep.Add(int64(k))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("publish: reading %s: %w", p.Local, rerr)
		}
	}
	if n != st.Size() {
		return fmt.Errorf("publish: %s changed while it was hashed (%d bytes read, %d expected)", p.Local, n, st.Size())
	}
	p.sha256 = hex.EncodeToString(h.Sum(nil))
	if gitHash != nil {
		p.gitSHA1 = hex.EncodeToString(gitHash.Sum(nil))
	}
	return jr.setHash(abs, journalHash{Size: st.Size(), ModNano: st.ModTime().UnixNano(), SHA256: p.sha256, GitSHA1: p.gitSHA1})
}

// guessLFS is the local guess shown by a dry run; the Hub's preupload
// answer decides for real.
func guessLFS(p string, size int64) bool {
	switch strings.ToLower(path.Ext(p)) {
	case ".gguf", ".safetensors", ".bin":
		return size > 0
	}
	return size >= maxRegular
}
