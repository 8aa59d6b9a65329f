package hubtest

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/phonellm/phonellm/pipeline/hfhub"
)

func (h *Hub) whoami(w http.ResponseWriter, r *http.Request) {
	if !h.requireToken(w, r) {
		return
	}
	orgs := []map[string]any{}
	for _, o := range h.cfg.Orgs {
		orgs = append(orgs, map[string]any{"type": "org", "name": o, "fullname": o})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"type": "user", "name": h.cfg.User, "fullname": h.cfg.User, "orgs": orgs,
		"auth": map[string]any{"type": "access_token", "accessToken": map[string]any{"displayName": "test", "role": "write"}},
	})
}

func (h *Hub) createRepo(w http.ResponseWriter, r *http.Request) {
	if !h.requireToken(w, r) {
		return
	}
	var req struct {
		Name         string `json:"name"`
		Organization string `json:"organization"`
		Type         string `json:"type"`
		Private      *bool  `json:"private"`
		Visibility   string `json:"visibility"`
	}
	if !decodeJSON(w, r, 1<<20, &req) {
		return
	}
	if req.Type != "" && req.Type != "model" {
		hubError(w, http.StatusBadRequest, "", "only model repos are supported by the fake Hub")
		return
	}
	ns := req.Organization
	if ns == "" {
		ns = h.cfg.User
	}
	id := ns + "/" + req.Name
	if err := hfhub.ValidateRepoID(id); err != nil {
		hubError(w, http.StatusBadRequest, "", "Invalid repo name: "+err.Error())
		return
	}
	if !h.canWrite(ns) {
		hubError(w, http.StatusForbidden, "", "You don't have the rights to create a model under the namespace \""+ns+"\"")
		return
	}
	private := req.Visibility == "private" || req.Private != nil && *req.Private
	if req.Visibility != "" && req.Visibility != "private" && req.Visibility != "public" && req.Visibility != "protected" {
		hubError(w, http.StatusBadRequest, "", "invalid visibility")
		return
	}
	h.mu.Lock()
	_, exists := h.repos[id]
	if !exists {
		h.createRepoLocked(id, private)
	}
	h.mu.Unlock()
	u := h.URL + "/" + id
	if exists {
		w.Header().Set("X-Error-Message", "You already created this model repo: "+id)
		writeJSON(w, http.StatusConflict, map[string]any{"error": "You already created this model repo", "url": u})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": u, "name": id, "id": id})
}

// readable finds a repo and checks read access: private repos need the
// token; an invalid token is refused everywhere (as the Hub does).
func (h *Hub) readable(w http.ResponseWriter, r *http.Request, id string) (*repo, bool) {
	present, valid := h.bearer(r)
	if present && !valid {
		hubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return nil, false
	}
	h.mu.Lock()
	rp, ok := h.repos[id]
	h.mu.Unlock()
	if !ok || rp.private && !valid {
		st := http.StatusNotFound
		if !valid {
			st = http.StatusUnauthorized
		}
		hubError(w, st, "RepoNotFound", "Repository not found")
		return nil, false
	}
	return rp, true
}

// writable finds a repo the token may write.
func (h *Hub) writable(w http.ResponseWriter, r *http.Request, id string) (*repo, bool) {
	if !h.requireToken(w, r) {
		return nil, false
	}
	h.mu.Lock()
	rp, ok := h.repos[id]
	h.mu.Unlock()
	if !ok {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, false
	}
	ns, _, _ := strings.Cut(id, "/")
	if !h.canWrite(ns) {
		hubError(w, http.StatusForbidden, "", "You don't have the rights to write to "+id)
		return nil, false
	}
	return rp, true
}

var lfsExt = map[string]bool{".gguf": true, ".safetensors": true, ".bin": true, ".pt": true, ".pth": true, ".onnx": true, ".zip": true}

// wantsLFS is the fake's rule (documented approximation of the Hub's):
// empty files are regular; big files, binary samples and model extensions are
// LFS.
func (h *Hub) wantsLFS(p string, size int64, sample []byte) bool {
	if size == 0 {
		return false
	}
	return size >= h.cfg.LFSThreshold || bytes.IndexByte(sample, 0) >= 0 || lfsExt[strings.ToLower(path.Ext(p))]
}

func (h *Hub) preupload(w http.ResponseWriter, r *http.Request, id, rev string) {
	rp, ok := h.writable(w, r, id)
	if !ok {
		return
	}
	var req struct {
		Files []struct {
			Path   string `json:"path"`
			Size   *int64 `json:"size"`
			Sample string `json:"sample"`
		} `json:"files"`
		GitAttributes string `json:"gitAttributes"`
	}
	if !decodeJSON(w, r, 16<<20, &req) {
		return
	}
	if len(req.Files) == 0 || len(req.Files) > 256 {
		hubError(w, http.StatusUnprocessableEntity, "", "files: want 1 to 256 entries, got "+strconv.Itoa(len(req.Files)))
		return
	}
	h.mu.Lock()
	head := rp.resolve(rev)
	h.mu.Unlock()
	if head == nil && r.URL.Query().Get("create_pr") != "1" {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	type fileOut struct {
		Path         string `json:"path"`
		UploadMode   string `json:"uploadMode"`
		ShouldIgnore bool   `json:"shouldIgnore"`
		Oid          string `json:"oid,omitempty"`
	}
	out := []fileOut{}
	for _, f := range req.Files {
		if !validRepoPath(f.Path) || f.Size == nil || *f.Size < 0 {
			hubError(w, http.StatusUnprocessableEntity, "", "invalid file entry "+strconv.Quote(f.Path))
			return
		}
		sample, err := base64.StdEncoding.DecodeString(f.Sample)
		if err != nil || len(sample) > 512 {
			hubError(w, http.StatusUnprocessableEntity, "", "invalid sample for "+strconv.Quote(f.Path))
			return
		}
		fo := fileOut{Path: f.Path, UploadMode: "regular"}
		if h.wantsLFS(f.Path, *f.Size, sample) {
			fo.UploadMode = "lfs"
		}
		if head != nil {
			h.mu.Lock()
			if e, ok := head.files[f.Path]; ok {
				fo.Oid = e.blobID
				if e.lfsOid != "" {
					fo.Oid = e.lfsOid
				}
			}
			h.mu.Unlock()
		}
		out = append(out, fo)
	}
	resp := map[string]any{"files": out}
	if head != nil {
		resp["commitOid"] = head.oid
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Hub) revision(w http.ResponseWriter, r *http.Request, id, rev string) {
	rp, ok := h.readable(w, r, id)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := rp.resolve(rev)
	if c == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	sib := []map[string]any{}
	for _, p := range sortedKeys(c.files) {
		sib = append(sib, map[string]any{"rfilename": p})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"_id": id, "id": id, "modelId": id, "sha": c.oid, "private": rp.private,
		"author": strings.SplitN(id, "/", 2)[0], "siblings": sib, "tags": []string{"gguf"},
		"lastModified": time.Now().UTC().Format(time.RFC3339),
	})
}

func (h *Hub) tree(w http.ResponseWriter, r *http.Request, id, rev, sub string) {
	rp, ok := h.readable(w, r, id)
	if !ok {
		return
	}
	recursive := r.URL.Query().Get("recursive") == "true" || r.URL.Query().Get("recursive") == "1"
	h.mu.Lock()
	defer h.mu.Unlock()
	c := rp.resolve(rev)
	if c == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	prefix := ""
	if sub != "" {
		prefix = strings.TrimSuffix(sub, "/") + "/"
	}
	out := []map[string]any{}
	dirs := map[string]bool{}
	for _, p := range sortedKeys(c.files) {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		rest := strings.TrimPrefix(p, prefix)
		if !recursive {
			if d, _, isDir := strings.Cut(rest, "/"); isDir {
				if !dirs[d] {
					dirs[d] = true
					out = append(out, map[string]any{"type": "directory", "oid": gitBlobID([]byte(prefix + d)), "size": 0, "path": prefix + d})
				}
				continue
			}
		}
		e := c.files[p]
		m := map[string]any{"type": "file", "oid": e.blobID, "size": e.size, "path": p}
		if e.lfsOid != "" {
			m["lfs"] = map[string]any{"oid": e.lfsOid, "size": e.size, "pointerSize": e.pointer}
		}
		out = append(out, m)
	}
	if sub != "" && len(out) == 0 {
		hubError(w, http.StatusNotFound, "EntryNotFound", sub+" does not exist on \""+rev+"\"")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) resolve(w http.ResponseWriter, r *http.Request, id, rev, file string) {
	rp, ok := h.readable(w, r, id)
	if !ok {
		return
	}
	h.mu.Lock()
	c := rp.resolve(rev)
	var e *entry
	if c != nil {
		e = c.files[file]
	}
	h.mu.Unlock()
	if c == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	if e == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", file+" does not exist on \""+rev+"\"")
		return
	}
	w.Header().Set("X-Repo-Commit", c.oid)
	w.Header().Set("Accept-Ranges", "bytes")
	if e.lfsOid != "" {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Linked-Etag", `"`+e.lfsOid+`"`)
		w.Header().Set("X-Linked-Size", strconv.FormatInt(e.size, 10))
		w.Header().Set("ETag", `"`+e.blobID+`"`)
		w.Header().Set("Location", h.presign(h.StorageURL, http.MethodGet, "/cdn/"+e.lfsOid))
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+e.blobID+`"`)
	body := e.content
	if downloadFault(r) == FaultCorrupt && len(body) > 0 {
		body = append([]byte(nil), body...)
		body[len(body)/2] ^= 0xff
	}
	serveBytes(w, r, body)
}

func (h *Hub) createBranch(w http.ResponseWriter, r *http.Request, id, branch string) {
	rp, ok := h.writable(w, r, id)
	if !ok {
		return
	}
	var req struct {
		StartingPoint string `json:"startingPoint"`
	}
	if !decodeJSON(w, r, 1<<20, &req) {
		return
	}
	if !validRepoPath(branch) || strings.HasPrefix(branch, "refs/") {
		hubError(w, http.StatusBadRequest, "", "invalid branch name "+strconv.Quote(branch))
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, exists := rp.branches[branch]; exists {
		hubError(w, http.StatusConflict, "", "Reference already exists")
		return
	}
	from := req.StartingPoint
	if from == "" {
		from = "main"
	}
	c := rp.resolve(from)
	if c == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+from)
		return
	}
	rp.branches[branch] = c.oid
	writeJSON(w, http.StatusOK, map[string]any{})
}
