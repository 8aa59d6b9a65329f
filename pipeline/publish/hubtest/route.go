package hubtest

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
)

type route struct {
	op   Op
	h    http.HandlerFunc
	oid  string
	part int
	last int // number of parts of the upload, for Fault.Part == -1
}

type faultKey struct{}

// downloadFault returns the download fault attached to the request, if any.
func downloadFault(r *http.Request) FaultKind {
	if k, ok := r.Context().Value(faultKey{}).(FaultKind); ok {
		return k
	}
	return -1
}

func (h *Hub) serveAPI(w http.ResponseWriter, r *http.Request) { h.serve(w, r, h.routeAPI(r)) }

func (h *Hub) serveStorage(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, h.routeStorage(r))
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request, rt route) {
	w.Header().Set("Access-Control-Expose-Headers", "X-Repo-Commit,X-Request-Id,X-Error-Code,X-Error-Message,X-Total-Count,ETag,Link,Accept-Ranges,Content-Range,X-Linked-Size,X-Linked-ETag,X-Xet-Hash")
	w.Header().Set("X-Request-Id", "Root="+randomID())
	sw := &statusWriter{ResponseWriter: w}
	rec := Request{Op: rt.op, Method: r.Method, Host: r.Host, Path: r.URL.Path, Auth: r.Header.Get("Authorization") != "", Oid: rt.oid, Part: rt.part}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		_, rec.Port, _ = net.SplitHostPort(a.String())
	}
	defer func() {
		p := recover()
		if p == nil {
			rec.Status = sw.status
			if rec.Status == 0 {
				rec.Status = http.StatusOK
			}
		}
		h.mu.Lock()
		h.log = append(h.log, rec)
		h.mu.Unlock()
		if h.cfg.OnRequest != nil {
			h.cfg.OnRequest(rec)
		}
		if p != nil {
			panic(p)
		}
	}()
	if f := h.takeFault(rt.op, rt.part, rt.last); f != nil {
		rec.Fault = f.String()
		if h.applyFault(f, sw, r, rt.h) {
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), faultKey{}, f.Kind))
	}
	rt.h(sw, r)
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	hubError(w, http.StatusNotFound, "", "Not Found")
}

func methodNotAllowed(w http.ResponseWriter, _ *http.Request) {
	hubError(w, http.StatusMethodNotAllowed, "", "Method Not Allowed")
}

func want(r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	return false
}

func (h *Hub) routeAPI(r *http.Request) route {
	s, err := segments(r)
	if err != nil {
		return route{op: OpUnknown, h: notFound}
	}
	n := len(s)
	check := func(op Op, hf http.HandlerFunc, methods ...string) route {
		if !want(r, methods...) {
			return route{op: op, h: methodNotAllowed}
		}
		return route{op: op, h: hf}
	}
	switch {
	case n == 2 && s[0] == "api" && s[1] == "whoami-v2":
		return check(OpWhoAmI, h.whoami, http.MethodGet)
	case n == 3 && s[0] == "api" && s[1] == "repos" && s[2] == "create":
		return check(OpCreate, h.createRepo, http.MethodPost)
	case n == 4 && s[0] == "api" && s[1] == "models":
		repo := s[2] + "/" + s[3]
		return check(OpRevision, func(w http.ResponseWriter, r *http.Request) { h.revision(w, r, repo, "main") }, http.MethodGet)
	case n == 6 && s[0] == "api" && s[1] == "models" && s[4] == "preupload":
		repo, rev := s[2]+"/"+s[3], s[5]
		return check(OpPreupload, func(w http.ResponseWriter, r *http.Request) { h.preupload(w, r, repo, rev) }, http.MethodPost)
	case n == 6 && s[0] == "api" && s[1] == "models" && s[4] == "commit":
		repo, rev := s[2]+"/"+s[3], s[5]
		return check(OpCommit, func(w http.ResponseWriter, r *http.Request) { h.commit(w, r, repo, rev) }, http.MethodPost)
	case n == 6 && s[0] == "api" && s[1] == "models" && s[4] == "revision":
		repo, rev := s[2]+"/"+s[3], s[5]
		return check(OpRevision, func(w http.ResponseWriter, r *http.Request) { h.revision(w, r, repo, rev) }, http.MethodGet)
	case n == 6 && s[0] == "api" && s[1] == "models" && s[4] == "branch":
		repo, branch := s[2]+"/"+s[3], s[5]
		return check(OpBranch, func(w http.ResponseWriter, r *http.Request) { h.createBranch(w, r, repo, branch) }, http.MethodPost)
	case n >= 6 && s[0] == "api" && s[1] == "models" && s[4] == "tree":
		repo, rev, sub := s[2]+"/"+s[3], s[5], strings.Join(s[6:], "/")
		return check(OpTree, func(w http.ResponseWriter, r *http.Request) { h.tree(w, r, repo, rev, sub) }, http.MethodGet)
	case n == 6 && strings.HasSuffix(s[1], ".git") && s[2] == "info" && s[3] == "lfs" && s[4] == "objects" && s[5] == "batch":
		repo := s[0] + "/" + strings.TrimSuffix(s[1], ".git")
		return check(OpBatch, func(w http.ResponseWriter, r *http.Request) { h.batch(w, r, repo) }, http.MethodPost)
	case n >= 5 && s[2] == "resolve":
		repo, rev, file := s[0]+"/"+s[1], s[3], strings.Join(s[4:], "/")
		return check(OpResolve, func(w http.ResponseWriter, r *http.Request) { h.resolve(w, r, repo, rev, file) }, http.MethodGet, http.MethodHead)
	case n == 3 && s[0] == "lfs" && s[1] == "complete":
		id := s[2]
		rt := check(OpComplete, func(w http.ResponseWriter, r *http.Request) { h.complete(w, r, id) }, http.MethodPost)
		rt.oid = h.uploadOid(id)
		return rt
	case n == 2 && s[0] == "lfs" && s[1] == "verify":
		return check(OpVerify, h.verify, http.MethodPost)
	}
	return route{op: OpUnknown, h: notFound}
}

func (h *Hub) routeStorage(r *http.Request) route {
	s, err := segments(r)
	if err != nil {
		return route{op: OpUnknown, h: notFound}
	}
	switch {
	case len(s) == 2 && s[0] == "put":
		oid := s[1]
		if !want(r, http.MethodPut) {
			return route{op: OpPutBasic, h: methodNotAllowed, oid: oid}
		}
		return route{op: OpPutBasic, oid: oid, h: func(w http.ResponseWriter, r *http.Request) { h.putBasic(w, r, oid) }}
	case len(s) == 3 && s[0] == "part":
		id := s[1]
		n, err := strconv.Atoi(s[2])
		if err != nil || n < 1 {
			return route{op: OpPutPart, h: notFound}
		}
		rt := route{op: OpPutPart, part: n, oid: h.uploadOid(id), last: h.uploadParts(id)}
		if !want(r, http.MethodPut) {
			rt.h = methodNotAllowed
			return rt
		}
		rt.h = func(w http.ResponseWriter, r *http.Request) { h.putPart(w, r, id, n) }
		return rt
	case len(s) == 2 && s[0] == "cdn":
		oid := s[1]
		if !want(r, http.MethodGet, http.MethodHead) {
			return route{op: OpCDN, h: methodNotAllowed, oid: oid}
		}
		return route{op: OpCDN, oid: oid, h: func(w http.ResponseWriter, r *http.Request) { h.cdn(w, r, oid) }}
	}
	return route{op: OpUnknown, h: notFound}
}
