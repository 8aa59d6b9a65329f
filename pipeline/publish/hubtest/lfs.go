package hubtest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var oidRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// upload is one multipart upload in progress. Parts are written at their
// offsets into one data file, and hashed in order as soon as they are
// contiguous, so completion needs no second pass in the common case.
type upload struct {
	id     string
	oid    string
	size   int64
	chunk  int64
	nparts int
	data   string // dir/uploads/<id>

	mu        sync.Mutex
	etags     map[int]string
	sum       hash.Hash
	next      int            // next part to feed to sum
	hashedTag map[int]string // ETag of each part when it was hashed
}

func (u *upload) partLen(n int) int64 {
	if n < u.nparts {
		return u.chunk
	}
	return u.size - int64(u.nparts-1)*u.chunk
}

func (h *Hub) uploadOid(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.uploads[id]; ok {
		return u.oid
	}
	return ""
}

func (h *Hub) uploadParts(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.uploads[id]; ok {
		return u.nparts
	}
	return 0
}

type batchObject struct {
	Oid  string `json:"oid"`
	Size int64  `json:"size"`
}

func (h *Hub) batch(w http.ResponseWriter, r *http.Request, id string) {
	if !strings.Contains(r.Header.Get("Accept"), "application/vnd.git-lfs+json") ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "application/vnd.git-lfs+json") {
		hubError(w, http.StatusNotAcceptable, "", "LFS batch needs Accept and Content-Type application/vnd.git-lfs+json")
		return
	}
	if _, ok := h.writable(w, r, id); !ok {
		return
	}
	var req struct {
		Operation string        `json:"operation"`
		Transfers []string      `json:"transfers"`
		HashAlgo  string        `json:"hash_algo"`
		Objects   []batchObject `json:"objects"`
		Ref       *struct {
			Name string `json:"name"`
		} `json:"ref"`
	}
	if !decodeJSON(w, r, 16<<20, &req) {
		return
	}
	if req.Operation != "upload" {
		writeLFSError(w, http.StatusUnprocessableEntity, "only the upload operation is served")
		return
	}
	if req.HashAlgo != "" && req.HashAlgo != "sha256" && req.HashAlgo != "sha_256" {
		writeLFSError(w, http.StatusConflict, "unsupported hash_algo "+strconv.Quote(req.HashAlgo))
		return
	}
	basic, multi := false, false
	for _, t := range req.Transfers {
		basic = basic || t == "basic"
		multi = multi || t == "multipart"
	}
	if len(req.Transfers) > 0 && !basic && !multi {
		writeLFSError(w, http.StatusUnprocessableEntity, "no supported transfer among "+strings.Join(req.Transfers, ","))
		return
	}
	if len(req.Objects) == 0 || len(req.Objects) > 1000 {
		writeLFSError(w, http.StatusUnprocessableEntity, "objects: want 1 to 1000 entries")
		return
	}
	transfer := "basic"
	exp := time.Now().Add(h.cfg.URLExpiry).UTC()
	var out []map[string]any
	for _, o := range req.Objects {
		obj := map[string]any{"oid": o.Oid, "size": o.Size}
		if !oidRE.MatchString(o.Oid) || o.Size < 0 {
			obj["error"] = map[string]any{"code": 422, "message": "invalid oid or size"}
			out = append(out, obj)
			continue
		}
		h.mu.Lock()
		stored, have := h.objects[o.Oid]
		h.mu.Unlock()
		if have {
			if stored != o.Size {
				obj["error"] = map[string]any{"code": 422, "message": fmt.Sprintf("object %s is stored with size %d, not %d", o.Oid, stored, o.Size)}
			}
			// Known object: no actions, the client skips the upload.
			out = append(out, obj)
			continue
		}
		verify := map[string]any{"href": h.URL + "/lfs/verify", "expires_at": exp.Format(time.RFC3339)}
		if multi && o.Size >= h.cfg.MultipartThreshold {
			transfer = "multipart"
			u := h.openUpload(o.Oid, o.Size)
			header := map[string]string{"chunk_size": strconv.FormatInt(u.chunk, 10)}
			for n := 1; n <= u.nparts; n++ {
				header[fmt.Sprintf("%05d", n)] = h.presign(h.StorageURL, http.MethodPut, fmt.Sprintf("/part/%s/%d", u.id, n))
			}
			obj["actions"] = map[string]any{
				"upload": map[string]any{"href": h.presign(h.URL, http.MethodPost, "/lfs/complete/"+u.id), "header": header, "expires_at": exp.Format(time.RFC3339)},
				"verify": verify,
			}
		} else {
			obj["actions"] = map[string]any{
				"upload": map[string]any{"href": h.presign(h.StorageURL, http.MethodPut, "/put/"+o.Oid), "expires_at": exp.Format(time.RFC3339)},
				"verify": verify,
			}
		}
		out = append(out, obj)
	}
	w.Header().Set("Content-Type", "application/vnd.git-lfs+json")
	writeJSON(w, http.StatusOK, map[string]any{"transfer": transfer, "objects": out})
}

func writeLFSError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/vnd.git-lfs+json")
	w.Header().Set("X-Error-Message", msg)
	writeJSON(w, status, map[string]any{"message": msg})
}

// openUpload returns the in-progress multipart upload of oid, so parts
// accepted before a client restart stay valid, or starts one.
func (h *Hub) openUpload(oid string, size int64) *upload {
	h.mu.Lock()
	defer h.mu.Unlock()
	if id, ok := h.uploadByOid[oid]; ok {
		if u := h.uploads[id]; u != nil && u.size == size {
			return u
		}
	}
	n := int((size + h.cfg.ChunkSize - 1) / h.cfg.ChunkSize)
	u := &upload{id: randomID(), oid: oid, size: size, chunk: h.cfg.ChunkSize, nparts: n,
		etags: map[int]string{}, sum: sha256.New(), next: 1, hashedTag: map[int]string{}}
	u.data = filepath.Join(h.dir, "uploads", u.id)
	if f, err := os.Create(u.data); err == nil {
		f.Truncate(size)
		f.Close()
	}
	h.uploads[u.id] = u
	h.uploadByOid[oid] = u.id
	return u
}

// checkStoragePut enforces what S3 presigned PUTs need: no Hub token, a
// valid signature and an explicit Content-Length equal to want.
func (h *Hub) checkStoragePut(w http.ResponseWriter, r *http.Request, want int64) bool {
	if r.Header.Get("Authorization") != "" {
		s3Error(w, http.StatusBadRequest, "InvalidArgument", "Only one auth mechanism allowed; the Hub token must not be sent to a presigned URL")
		return false
	}
	if !h.checkSig(w, r, http.MethodPut) {
		return false
	}
	if r.ContentLength < 0 || len(r.TransferEncoding) > 0 {
		s3Error(w, http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header.")
		return false
	}
	if r.ContentLength != want {
		s3Error(w, http.StatusBadRequest, "IncompleteBody", fmt.Sprintf("Content-Length %d, want %d", r.ContentLength, want))
		return false
	}
	return true
}

// receive streams the body to a temp file, hashing it with hs.
func (h *Hub) receive(r *http.Request, want int64, hs ...hash.Hash) (string, error) {
	f, err := os.CreateTemp(filepath.Join(h.dir, "tmp"), "put-*")
	if err != nil {
		return "", err
	}
	ws := []io.Writer{f}
	for _, x := range hs {
		ws = append(ws, x)
	}
	n, err := io.Copy(io.MultiWriter(ws...), io.LimitReader(r.Body, want+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != want {
		err = fmt.Errorf("body has %d bytes, want %d", n, want)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func (h *Hub) putBasic(w http.ResponseWriter, r *http.Request, oid string) {
	if !oidRE.MatchString(oid) {
		s3Error(w, http.StatusBadRequest, "InvalidArgument", "bad object key")
		return
	}
	// The signed URL pins the oid; the size comes from Content-Length and is
	// checked with the hash below.
	if !h.checkStoragePut(w, r, r.ContentLength) {
		return
	}
	sum := sha256.New()
	tmp, err := h.receive(r, r.ContentLength, sum)
	if err != nil {
		s3Error(w, http.StatusBadRequest, "IncompleteBody", err.Error())
		return
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != oid {
		os.Remove(tmp)
		s3Error(w, http.StatusBadRequest, "BadDigest", "sha256 of the body is "+got+", not "+oid)
		return
	}
	if err := h.storeObject(tmp, oid, r.ContentLength); err != nil {
		s3Error(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("ETag", `"`+oid[:32]+`"`)
	w.WriteHeader(http.StatusOK)
}

func (h *Hub) storeObject(tmp, oid string, size int64) error {
	if err := os.Rename(tmp, filepath.Join(h.dir, "objects", oid)); err != nil {
		os.Remove(tmp)
		return err
	}
	h.mu.Lock()
	h.objects[oid] = size
	h.mu.Unlock()
	return nil
}

func (h *Hub) putPart(w http.ResponseWriter, r *http.Request, id string, n int) {
	h.mu.Lock()
	u := h.uploads[id]
	h.mu.Unlock()
	if u == nil {
		s3Error(w, http.StatusNotFound, "NoSuchUpload", "The specified multipart upload does not exist.")
		return
	}
	if n > u.nparts {
		s3Error(w, http.StatusBadRequest, "InvalidPart", fmt.Sprintf("part %d of %d", n, u.nparts))
		return
	}
	plen := u.partLen(n)
	if !h.checkStoragePut(w, r, plen) {
		return
	}
	bp := h.partBuf(u.chunk)
	defer h.partBufs.Put(bp)
	buf := (*bp)[:plen] // bounded by the chunk size the fake chose
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		s3Error(w, http.StatusBadRequest, "IncompleteBody", fmt.Sprintf("part %d: %v", n, err))
		return
	}
	// S3 answers the part's MD5; any content digest works for the checks,
	// and CRC-32C (hardware) keeps the fake off the benchmark's CPU budget.
	etag := fmt.Sprintf(`"%08x-%d"`, crc32.Checksum(buf, castagnoli), len(buf))
	u.mu.Lock()
	defer u.mu.Unlock()
	f, err := os.OpenFile(u.data, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(buf, int64(n-1)*u.chunk)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s3Error(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	u.etags[n] = etag
	if n == u.next {
		u.sum.Write(buf)
		u.hashedTag[n] = etag
		u.next++
	}
	if err := u.advanceLocked(); err != nil {
		s3Error(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("ETag", etag)
	w.WriteHeader(http.StatusOK)
}

// partBuf returns a pooled buffer of at least n bytes.
func (h *Hub) partBuf(n int64) *[]byte {
	if bp, ok := h.partBufs.Get().(*[]byte); ok && int64(cap(*bp)) >= n {
		return bp
	}
	b := make([]byte, n)
	return &b
}

// advanceLocked hashes stored parts that are now contiguous.
func (u *upload) advanceLocked() error {
	if u.next > u.nparts || u.etags[u.next] == "" {
		return nil
	}
	f, err := os.Open(u.data)
	if err != nil {
		return err
	}
	defer f.Close()
	for u.next <= u.nparts && u.etags[u.next] != "" {
		n := u.next
		if _, err := io.Copy(u.sum, io.NewSectionReader(f, int64(n-1)*u.chunk, u.partLen(n))); err != nil {
			return err
		}
		u.hashedTag[n] = u.etags[n]
		u.next++
	}
	return nil
}

// complete checks that every part is listed once, in order, with the ETag
// the storage returned, then that the assembled bytes have the announced
// sha256 and size, and only then makes the object visible.
func (h *Hub) complete(w http.ResponseWriter, r *http.Request, id string) {
	if r.Header.Get("Authorization") != "" {
		hubError(w, http.StatusBadRequest, "", "the completion URL is presigned: the Hub token must not be sent")
		return
	}
	if !h.checkSig(w, r, http.MethodPost) {
		return
	}
	var req struct {
		Oid   string `json:"oid"`
		Parts []struct {
			PartNumber int    `json:"partNumber"`
			ETag       string `json:"etag"`
		} `json:"parts"`
	}
	if !decodeJSON(w, r, 16<<20, &req) {
		return
	}
	h.mu.Lock()
	u := h.uploads[id]
	h.mu.Unlock()
	if u == nil {
		hubError(w, http.StatusNotFound, "", "no such multipart upload")
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if req.Oid != u.oid {
		hubError(w, http.StatusBadRequest, "", "oid "+req.Oid+" does not match the upload's "+u.oid)
		return
	}
	if len(req.Parts) != u.nparts {
		hubError(w, http.StatusBadRequest, "", fmt.Sprintf("completion lists %d parts, the upload has %d", len(req.Parts), u.nparts))
		return
	}
	for i, p := range req.Parts {
		if p.PartNumber != i+1 {
			hubError(w, http.StatusBadRequest, "", fmt.Sprintf("parts must be listed once each in order: entry %d is part %d", i, p.PartNumber))
			return
		}
		got, ok := u.etags[p.PartNumber]
		if !ok {
			hubError(w, http.StatusBadRequest, "", fmt.Sprintf("part %d was never uploaded", p.PartNumber))
			return
		}
		if got != p.ETag {
			hubError(w, http.StatusBadRequest, "", fmt.Sprintf("part %d: etag %s does not match the stored part's %s", p.PartNumber, p.ETag, got))
			return
		}
	}
	for n := 1; n <= u.nparts; n++ {
		if u.hashedTag[n] != "" && u.hashedTag[n] != u.etags[n] {
			// A part was replaced after it was hashed: hash again from zero.
			u.sum, u.next, u.hashedTag = sha256.New(), 1, map[int]string{}
			break
		}
	}
	err := u.advanceLocked()
	if err == nil {
		if got := hex.EncodeToString(u.sum.Sum(nil)); u.next != u.nparts+1 || got != u.oid {
			err = errors.New("assembled object has sha256 " + got + ", want " + u.oid + " (" + strconv.FormatInt(u.size, 10) + " bytes)")
		}
	}
	if err != nil {
		// Wrong bytes never become visible: the upload is discarded and the
		// client must upload again.
		h.mu.Lock()
		delete(h.uploads, id)
		delete(h.uploadByOid, u.oid)
		h.mu.Unlock()
		os.Remove(u.data)
		hubError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	if err := os.Rename(u.data, filepath.Join(h.dir, "objects", u.oid)); err != nil {
		hubError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	h.mu.Lock()
	h.objects[u.oid] = u.size
	delete(h.uploads, id)
	delete(h.uploadByOid, u.oid)
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"oid": u.oid, "size": u.size})
}

func (h *Hub) verify(w http.ResponseWriter, r *http.Request) {
	if !h.requireToken(w, r) {
		return
	}
	var req batchObject
	if !decodeJSON(w, r, 1<<20, &req) {
		return
	}
	h.mu.Lock()
	size, ok := h.objects[req.Oid]
	h.mu.Unlock()
	switch {
	case !ok:
		writeLFSError(w, http.StatusNotFound, "object "+req.Oid+" not found")
	case size != req.Size:
		writeLFSError(w, http.StatusUnprocessableEntity, fmt.Sprintf("object %s has size %d, not %d", req.Oid, size, req.Size))
	default:
		w.Header().Set("Content-Type", "application/vnd.git-lfs+json")
		b, _ := json.Marshal(map[string]any{"oid": req.Oid, "size": size})
		w.Write(b)
	}
}
