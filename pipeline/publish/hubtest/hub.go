package hubtest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/hfhub"
)

// DefaultToken is the write token the fake accepts unless Config.Token is set.
const DefaultToken = "hf_test_write_token"

// Config tunes the fake. The zero value is usable.
type Config struct {
	Token string   // accepted bearer token (DefaultToken)
	User  string   // whoami name and writable namespace ("tester")
	Orgs  []string // further writable namespaces
	// LFSThreshold: preupload answers "lfs" for files at least this large,
	// binary samples and *.gguf/*.safetensors/*.bin (default 10 MiB; the
	// Hub's regular-file limit).
	LFSThreshold int64
	// MultipartThreshold: LFS batch answers multipart at or above this size
	// (default 64 MiB); ChunkSize is the part size (default 16 MiB).
	MultipartThreshold int64
	ChunkSize          int64
	URLExpiry          time.Duration // presigned URL lifetime (1 h)
	MaxCommitBytes     int64         // NDJSON body cap (64 MiB)
	HangMax            time.Duration // how long FaultHang holds a request at most (30 s)
	// APIHost and StorageHost are the host names of URL and AltURL, and of StorageURL (defaults
	// "127.0.0.1" and "localhost": different hosts). Tests of credential leaks set names that their client
	// resolves to loopback itself (hub.test, cdn.hub.test): storage on another port of the API's host, or
	// on a subdomain of it. The servers listen on 127.0.0.1 whatever the names.
	APIHost, StorageHost string
	// OnRequest, if set, is called after every request with its outcome.
	OnRequest func(Request)
}

// Hub is a running fake: an API host (URL) and a storage host (StorageURL)
// whose host names differ. AltURL serves the same API on another port, a
// second origin for redirects (see FaultRedirect).
type Hub struct {
	URL        string
	StorageURL string
	AltURL     string

	cfg    Config
	dir    string
	secret []byte
	api    *httptest.Server
	store  *httptest.Server
	alt    *httptest.Server

	mu          sync.Mutex
	repos       map[string]*repo
	objects     map[string]int64   // oid → size, bytes in dir/objects/<oid>
	uploads     map[string]*upload // upload id → multipart upload
	uploadByOid map[string]string
	faults      []*Fault
	log         []Request
	seq         int
	done        chan struct{}
	closeOnce   sync.Once
	partBufs    sync.Pool // *[]byte of ChunkSize, for part bodies
}

// Request is one handled request, for assertions.
type Request struct {
	Op     Op
	Method string
	Host   string // the Host the client sent: which origin it thought it was talking to
	Port   string // the port of the listener that served it (URL's, AltURL's or StorageURL's)
	Path   string
	Auth   bool   // an Authorization header was present
	Status int    // 0 when the connection was dropped
	Oid    string // object id for LFS/storage operations
	Part   int    // part number for OpPutPart
	Fault  string // the injected fault, if any
}

// Start runs a Hub until the test ends, storing objects under t.TempDir().
func Start(tb testing.TB, cfg Config) *Hub {
	tb.Helper()
	h, err := New(tb.TempDir(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	return h
}

// New runs a Hub storing objects under dir; Close stops it.
func New(dir string, cfg Config) (*Hub, error) {
	if cfg.Token == "" {
		cfg.Token = DefaultToken
	}
	if cfg.User == "" {
		cfg.User = "tester"
	}
	if cfg.LFSThreshold <= 0 {
		cfg.LFSThreshold = 10 << 20
	}
	if cfg.MultipartThreshold <= 0 {
		cfg.MultipartThreshold = 64 << 20
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 16 << 20
	}
	if cfg.URLExpiry <= 0 {
		cfg.URLExpiry = time.Hour
	}
	if cfg.MaxCommitBytes <= 0 {
		cfg.MaxCommitBytes = 64 << 20
	}
	if cfg.HangMax <= 0 {
		cfg.HangMax = 30 * time.Second
	}
	if cfg.APIHost == "" {
		cfg.APIHost = "127.0.0.1"
	}
	if cfg.StorageHost == "" {
		cfg.StorageHost = "localhost"
	}
	for _, sub := range []string{"objects", "uploads", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	h := &Hub{
		cfg: cfg, dir: dir, secret: make([]byte, 32),
		repos: map[string]*repo{}, objects: map[string]int64{},
		uploads: map[string]*upload{}, uploadByOid: map[string]string{}, done: make(chan struct{}),
	}
	rand.Read(h.secret)
	quiet := log.New(io.Discard, "", 0)
	h.api = httptest.NewUnstartedServer(http.HandlerFunc(h.serveAPI))
	h.api.Config.ErrorLog = quiet
	h.api.Start()
	h.store = httptest.NewUnstartedServer(http.HandlerFunc(h.serveStorage))
	h.store.Config.ErrorLog = quiet
	h.store.Start()
	h.alt = httptest.NewUnstartedServer(http.HandlerFunc(h.serveAPI))
	h.alt.Config.ErrorLog = quiet
	h.alt.Start()
	named := func(s *httptest.Server, host string) string {
		_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
		return "http://" + net.JoinHostPort(host, port)
	}
	h.URL = named(h.api, cfg.APIHost)
	h.AltURL = named(h.alt, cfg.APIHost)
	// By default a different host name than the API's 127.0.0.1, so clients
	// following the resolve redirect drop Authorization (net/http and fetch
	// both do).
	h.StorageURL = named(h.store, cfg.StorageHost)
	return h, nil
}

// Close stops the servers.
func (h *Hub) Close() {
	h.closeOnce.Do(func() { close(h.done) })
	for _, s := range []*httptest.Server{h.api, h.store, h.alt} {
		s.CloseClientConnections()
		s.Close()
	}
}

// Token returns the accepted bearer token.
func (h *Hub) Token() string { return h.cfg.Token }

// Config returns the effective configuration (defaults filled in).
func (h *Hub) Config() Config { return h.cfg }

// ---- state ----

type repo struct {
	id       string
	private  bool
	branches map[string]string // branch → commit oid
	commits  map[string]*commit
	prs      int
}

type commit struct {
	oid, parent, summary string
	files                map[string]*entry
}

type entry struct {
	size    int64
	lfsOid  string // sha256 for LFS files
	content []byte // regular files
	blobID  string // git blob sha1 of content or of the LFS pointer
	pointer int    // pointer size for LFS files
}

// FileEntry describes a committed file.
type FileEntry struct {
	Path   string
	Size   int64
	SHA256 string // LFS oid, or sha256 of a regular file's content
	LFS    bool
	BlobID string // git blob sha1 (of the pointer for LFS files)
}

// CommitInfo describes one commit.
type CommitInfo struct {
	Oid, Parent, Summary string
	Files                []FileEntry
}

func gitBlobID(b []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(b))
	s.Write(b)
	return hex.EncodeToString(s.Sum(nil))
}

// lfsPointer is the git-lfs pointer text (git-lfs docs/spec.md).
func lfsPointer(oid string, size int64) []byte {
	return []byte("version https://git-lfs.github.com/spec/v1\noid sha256:" + oid + "\nsize " + strconv.FormatInt(size, 10) + "\n")
}

func (e *entry) info(path string) FileEntry {
	fe := FileEntry{Path: path, Size: e.size, LFS: e.lfsOid != "", BlobID: e.blobID, SHA256: e.lfsOid}
	if !fe.LFS {
		s := sha256.Sum256(e.content)
		fe.SHA256 = hex.EncodeToString(s[:])
	}
	return fe
}

// CreateRepo makes an empty repo with an initial commit (as the Hub does,
// which adds .gitattributes). It is a no-op when the repo exists.
func (h *Hub) CreateRepo(id string, private bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.createRepoLocked(id, private)
}

func (h *Hub) createRepoLocked(id string, private bool) *repo {
	if r, ok := h.repos[id]; ok {
		return r
	}
	r := &repo{id: id, private: private, branches: map[string]string{}, commits: map[string]*commit{}}
	ga := []byte("*.gguf filter=lfs diff=lfs merge=lfs -text\n*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n")
	c := &commit{summary: "initial commit", files: map[string]*entry{
		".gitattributes": {size: int64(len(ga)), content: ga, blobID: gitBlobID(ga)},
	}}
	c.oid = h.newCommitOid(id, "", c.summary)
	r.commits[c.oid] = c
	r.branches["main"] = c.oid
	h.repos[id] = r
	return r
}

func (h *Hub) newCommitOid(repo, parent, summary string) string {
	h.seq++
	s := sha1.Sum([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d", repo, parent, summary, h.seq, time.Now().UnixNano())))
	return hex.EncodeToString(s[:])
}

// Head returns the commit a branch points at, or "".
func (h *Hub) Head(repoID, branch string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, ok := h.repos[repoID]; ok {
		return r.branches[branch]
	}
	return ""
}

// Commits lists the commits reachable from a branch, newest first.
func (h *Hub) Commits(repoID, branch string) []CommitInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.repos[repoID]
	if !ok {
		return nil
	}
	var out []CommitInfo
	for oid := r.branches[branch]; oid != ""; {
		c := r.commits[oid]
		ci := CommitInfo{Oid: c.oid, Parent: c.parent, Summary: c.summary}
		for _, p := range sortedKeys(c.files) {
			ci.Files = append(ci.Files, c.files[p].info(p))
		}
		out = append(out, ci)
		oid = c.parent
	}
	return out
}

// Files lists the files at a revision (branch or commit).
func (h *Hub) Files(repoID, rev string) map[string]FileEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.repos[repoID]
	if !ok {
		return nil
	}
	c := r.resolve(rev)
	if c == nil {
		return nil
	}
	out := map[string]FileEntry{}
	for p, e := range c.files {
		out[p] = e.info(p)
	}
	return out
}

// HasObject reports whether an LFS object is stored.
func (h *Hub) HasObject(oid string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.objects[oid]
	return ok
}

// Requests returns the request log.
func (h *Hub) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.log...)
}

// ResetLog clears the request log.
func (h *Hub) ResetLog() {
	h.mu.Lock()
	h.log = nil
	h.mu.Unlock()
}

// Count returns how many requests of op got a 2xx or 3xx answer.
func (h *Hub) Count(op Op) int {
	n := 0
	for _, r := range h.Requests() {
		if r.Op == op && r.Status >= 200 && r.Status < 400 {
			n++
		}
	}
	return n
}

// AcceptedParts lists the part numbers of oid whose PUT got a 2xx answer
// (with repeats, in arrival order).
func (h *Hub) AcceptedParts(oid string) []int {
	var out []int
	for _, r := range h.Requests() {
		if r.Op == OpPutPart && r.Oid == oid && r.Status >= 200 && r.Status < 300 {
			out = append(out, r.Part)
		}
	}
	return out
}

func (r *repo) resolve(rev string) *commit {
	if oid, ok := r.branches[rev]; ok {
		return r.commits[oid]
	}
	if c, ok := r.commits[rev]; ok {
		return c
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ---- signing ----

func (h *Hub) sign(method, path string, exp int64) string {
	m := hmac.New(sha256.New, h.secret)
	fmt.Fprintf(m, "%s %s %d", method, path, exp)
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// presign returns base+path with exp and sig query parameters.
func (h *Hub) presign(base, method, path string) string {
	exp := time.Now().Add(h.cfg.URLExpiry).Unix()
	return base + path + "?exp=" + strconv.FormatInt(exp, 10) + "&sig=" + h.sign(method, path, exp)
}

// checkSig validates a presigned URL: 403 for bad or expired signatures.
func (h *Hub) checkSig(w http.ResponseWriter, r *http.Request, method string) bool {
	q := r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	if err != nil || !hmac.Equal([]byte(q.Get("sig")), []byte(h.sign(method, r.URL.EscapedPath(), exp))) {
		s3Error(w, http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")
		return false
	}
	if time.Now().Unix() > exp {
		s3Error(w, http.StatusForbidden, "AccessDenied", "Request has expired")
		return false
	}
	return true
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>", code, msg)
}

// ---- helpers ----

// hubError answers like the Hub: X-Error-Code/X-Error-Message and a JSON
// {"error": msg} body.
func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	writeJSON(w, status, map[string]any{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// decodeJSON reads a bounded JSON body; it answers 400 itself on failure.
func decodeJSON(w http.ResponseWriter, r *http.Request, max int64, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		hubError(w, http.StatusBadRequest, "", "reading body: "+err.Error())
		return false
	}
	if int64(len(body)) > max {
		hubError(w, http.StatusRequestEntityTooLarge, "", "request body too large")
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		hubError(w, http.StatusBadRequest, "", "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

// bearer classifies the Authorization header: absent, valid or invalid.
func (h *Hub) bearer(r *http.Request) (present, valid bool) {
	a := r.Header.Get("Authorization")
	if a == "" {
		return false, false
	}
	tok, ok := strings.CutPrefix(a, "Bearer ")
	return true, ok && hmac.Equal([]byte(tok), []byte(h.cfg.Token))
}

// requireToken answers 401 unless a valid token is present.
func (h *Hub) requireToken(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := h.bearer(r); !ok {
		hubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return false
	}
	return true
}

func (h *Hub) canWrite(namespace string) bool {
	if namespace == h.cfg.User {
		return true
	}
	for _, o := range h.cfg.Orgs {
		if o == namespace {
			return true
		}
	}
	return false
}

// segments splits the escaped path and unescapes each segment, so an
// escaped revision like refs%2Fpr%2F1 stays one segment.
func segments(r *http.Request) ([]string, error) {
	raw := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	out := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

func randomID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func validRepoPath(p string) bool { return hfhub.ValidatePath(p) == nil }
