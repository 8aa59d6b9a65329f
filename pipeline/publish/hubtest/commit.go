package hubtest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// CommitOp is one parsed NDJSON operation of a commit.
type CommitOp struct {
	Key     string // "file", "lfsFile", "deletedFile", "deletedFolder"
	Path    string
	Content []byte // file
	Oid     string // lfsFile
	Size    int64  // lfsFile
}

// CommitHeader is the first NDJSON line of a commit.
type CommitHeader struct {
	Summary      string `json:"summary"`
	Description  string `json:"description"`
	ParentCommit string `json:"parentCommit"`
}

var parentRE = regexp.MustCompile(`^[0-9a-fA-F]{5,40}$`)

// ParseCommit parses an NDJSON commit body (header line first, then
// operations; trailing newline optional) strictly: unknown keys, bad base64,
// invalid paths, duplicate paths and non-sha256 LFS entries are errors.
func ParseCommit(body []byte) (CommitHeader, []CommitOp, error) {
	var hdr CommitHeader
	var ops []CommitOp
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	line := 0
	for sc.Scan() {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		line++
		var item struct {
			Key   string          `json:"key"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &item); err != nil {
			return hdr, nil, fmt.Errorf("line %d: %w", line, err)
		}
		if line == 1 {
			if item.Key != "header" {
				return hdr, nil, fmt.Errorf("line 1: first line must be the header, got key %q", item.Key)
			}
			if err := json.Unmarshal(item.Value, &hdr); err != nil {
				return hdr, nil, fmt.Errorf("header: %w", err)
			}
			if strings.TrimSpace(hdr.Summary) == "" {
				return hdr, nil, errors.New("header: summary must not be empty")
			}
			if hdr.ParentCommit != "" && !parentRE.MatchString(hdr.ParentCommit) {
				return hdr, nil, fmt.Errorf("header: parentCommit %q is not a commit id", hdr.ParentCommit)
			}
			continue
		}
		var v struct {
			Path     string `json:"path"`
			Content  string `json:"content"`
			Encoding string `json:"encoding"`
			Algo     string `json:"algo"`
			Oid      string `json:"oid"`
			Size     *int64 `json:"size"`
		}
		if err := json.Unmarshal(item.Value, &v); err != nil {
			return hdr, nil, fmt.Errorf("line %d (%s): %w", line, item.Key, err)
		}
		op := CommitOp{Key: item.Key, Path: v.Path}
		check := v.Path
		if item.Key == "deletedFolder" {
			check = strings.TrimSuffix(v.Path, "/")
		}
		if !validRepoPath(check) {
			return hdr, nil, fmt.Errorf("line %d (%s): invalid path %q", line, item.Key, v.Path)
		}
		switch item.Key {
		case "file":
			switch v.Encoding {
			case "base64":
				b, err := base64.StdEncoding.DecodeString(v.Content)
				if err != nil {
					return hdr, nil, fmt.Errorf("line %d: %s: content is not valid base64: %w", line, v.Path, err)
				}
				op.Content = b
			case "utf-8", "utf8":
				op.Content = []byte(v.Content)
			default:
				return hdr, nil, fmt.Errorf("line %d: %s: unsupported encoding %q", line, v.Path, v.Encoding)
			}
		case "lfsFile":
			if v.Algo != "sha256" {
				return hdr, nil, fmt.Errorf("line %d: %s: algo %q, want sha256", line, v.Path, v.Algo)
			}
			if !oidRE.MatchString(v.Oid) || v.Size == nil || *v.Size < 0 {
				return hdr, nil, fmt.Errorf("line %d: %s: want a 64-hex oid and a size", line, v.Path)
			}
			op.Oid, op.Size = v.Oid, *v.Size
		case "deletedFile", "deletedFolder":
		default:
			return hdr, nil, fmt.Errorf("line %d: unknown key %q", line, item.Key)
		}
		if seen[op.Path] {
			return hdr, nil, fmt.Errorf("line %d: path %q appears twice", line, op.Path)
		}
		seen[op.Path] = true
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return hdr, nil, err
	}
	if line == 0 {
		return hdr, nil, errors.New("empty commit body")
	}
	return hdr, ops, nil
}

func (h *Hub) commit(w http.ResponseWriter, r *http.Request, id, rev string) {
	rp, ok := h.writable(w, r, id)
	if !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		hubError(w, http.StatusBadRequest, "", "commit body must be application/x-ndjson, got "+strconv.Quote(ct))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.cfg.MaxCommitBytes+1))
	if err != nil {
		hubError(w, http.StatusBadRequest, "", "reading body: "+err.Error())
		return
	}
	if int64(len(body)) > h.cfg.MaxCommitBytes {
		hubError(w, http.StatusRequestEntityTooLarge, "", "commit payload too large")
		return
	}
	hdr, ops, err := ParseCommit(body)
	if err != nil {
		hubError(w, http.StatusBadRequest, "", "Bad request for commit endpoint: "+err.Error())
		return
	}
	createPR := r.URL.Query().Get("create_pr") == "1"

	h.mu.Lock()
	defer h.mu.Unlock()
	headOid, isBranch := rp.branches[rev]
	if !isBranch {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev+" (commits must target a branch)")
		return
	}
	if hdr.ParentCommit != "" && !createPR && !strings.HasPrefix(headOid, strings.ToLower(hdr.ParentCommit)) {
		hubError(w, http.StatusPreconditionFailed, "", "A commit has happened since. Please refresh and try again.")
		return
	}
	base := rp.commits[headOid]
	files := make(map[string]*entry, len(base.files))
	for p, e := range base.files {
		files[p] = e
	}
	for _, op := range ops {
		switch op.Key {
		case "file":
			if int64(len(op.Content)) >= h.cfg.LFSThreshold || bytes.IndexByte(op.Content, 0) >= 0 {
				hubError(w, http.StatusBadRequest, "", "Your push was rejected because it contains binary files or files larger than "+strconv.FormatInt(h.cfg.LFSThreshold, 10)+" bytes. Use LFS for "+op.Path)
				return
			}
			files[op.Path] = &entry{size: int64(len(op.Content)), content: op.Content, blobID: gitBlobID(op.Content)}
		case "lfsFile":
			size, stored := h.objects[op.Oid]
			if !stored {
				hubError(w, http.StatusBadRequest, "", "Bad request for commit endpoint: Your push was rejected because an LFS pointer pointed to a file that does not exist. For instance, this can happen if you used git push --no-verify to push your changes. Offending file: - "+op.Path)
				return
			}
			if size != op.Size {
				hubError(w, http.StatusBadRequest, "", fmt.Sprintf("Bad request for commit endpoint: %s: LFS object %s has size %d, the commit says %d", op.Path, op.Oid, size, op.Size))
				return
			}
			ptr := lfsPointer(op.Oid, size)
			files[op.Path] = &entry{size: size, lfsOid: op.Oid, blobID: gitBlobID(ptr), pointer: len(ptr)}
		case "deletedFile":
			if _, ok := files[op.Path]; !ok {
				hubError(w, http.StatusNotFound, "EntryNotFound", op.Path+" does not exist on \""+rev+"\"")
				return
			}
			delete(files, op.Path)
		case "deletedFolder":
			prefix := strings.TrimSuffix(op.Path, "/") + "/"
			found := false
			for p := range files {
				if strings.HasPrefix(p, prefix) {
					delete(files, p)
					found = true
				}
			}
			if !found {
				hubError(w, http.StatusNotFound, "EntryNotFound", op.Path+" does not exist on \""+rev+"\"")
				return
			}
		}
	}
	c := &commit{parent: headOid, summary: hdr.Summary, files: files}
	c.oid = h.newCommitOid(id, headOid, hdr.Summary)
	rp.commits[c.oid] = c
	resp := map[string]any{"success": true, "commitOid": c.oid, "commitUrl": h.URL + "/" + id + "/commit/" + c.oid, "hookOutput": ""}
	if createPR {
		rp.prs++
		rp.branches["refs/pr/"+strconv.Itoa(rp.prs)] = c.oid
		resp["pullRequestUrl"] = h.URL + "/" + id + "/discussions/" + strconv.Itoa(rp.prs)
	} else {
		rp.branches[rev] = c.oid
	}
	writeJSON(w, http.StatusOK, resp)
}
