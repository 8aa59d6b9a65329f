package acurast

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
)

func TestStatusAndEndpoints(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.Write([]byte(`{"status":"ok","slots":2}`))
		case "/status":
			w.Write([]byte(`{"state":"ready","tok_s":7.5}`))
		}
	}))
	defer ready.Close()
	loading := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		w.Write([]byte(`{"status":"downloading"}`))
	}))
	defer loading.Close()
	dir := t.TempDir()
	store := deploy.NewStore(dir)
	d := deploy.Deployment{ID: "q-1", Target: Target, Spec: deploy.Spec{Slots: 2, APIKeyEnv: "PHONELLM_API_KEY"}, State: deploy.StatePending,
		Replicas: []deploy.Replica{{Index: 0, URL: ready.URL, State: deploy.StatePending}, {Index: 1, URL: loading.URL, State: deploy.StatePending}, {Index: 2, URL: "http://127.0.0.1:1", State: deploy.StatePending}}}
	if err := store.Save(d); err != nil {
		t.Fatal(err)
	}
	f := &Fleet{Store: store, Dir: dir}
	st, err := f.Status(context.Background(), "q-1")
	if err != nil {
		t.Fatal(err)
	}
	r := st.Replicas
	if !r[0].Healthy || r[0].State != deploy.StateReady || !strings.Contains(string(r[0].Detail), "tok_s") ||
		r[1].Healthy || r[1].State != deploy.StateStarting || r[2].Error == "" || st.State != deploy.StateDegraded {
		t.Fatalf("status %+v", st)
	}
	eps, err := f.Endpoints(context.Background(), "q-1")
	if err != nil || len(eps) != 3 || eps[0].Slots != 2 || eps[0].APIKeyEnv != "PHONELLM_API_KEY" {
		t.Fatalf("endpoints %+v %v", eps, err)
	}
	// Stop of a deployment without registered jobs needs no chain access.
	if err := f.Stop(context.Background(), "q-1"); err != nil {
		t.Fatal(err)
	}
	got, _ := store.Load("q-1")
	if got.State != deploy.StateStopped {
		t.Fatalf("after stop: %s", got.State)
	}
	if _, err := f.Status(context.Background(), "nope"); !errors.Is(err, deploy.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestDriverOutputRedacted(t *testing.T) {
	s := testSDK(t)
	const secret = "sk-phonellm-redact-me-0123456789"
	s.Redact = []string{secret}
	_, err := s.Run(context.Background(), "pin", map[string]any{"file": filepath.Join(t.TempDir(), secret), "endpoint": "http://127.0.0.1:1"}, nil)
	var se *SDKError
	if !errors.As(err, &se) {
		t.Fatalf("want an SDKError, got %v", err)
	}
	if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("error not redacted: %v", err)
	}
}

func TestProjectsVocabulary(t *testing.T) {
	spec := deploy.Spec{Name: "m", Replicas: 2, APIKeyEnv: "PHONELLM_API_KEY"}
	o := Options{Duration: 36 * 60 * 60 * 1e9, AllowUnattested: true}.withDefaults(func(k string) string {
		if k == "ACURAST_RPC" {
			return "wss://example.invalid"
		}
		return ""
	})
	if o.RPC != "wss://example.invalid" || o.IPFS != DefaultIPFS || o.MaxCostPerExecution != 1_600_000_000_000 {
		t.Fatalf("defaults %+v", o)
	}
	ps := Projects(spec, o, "ipfs://x", time.Time{})
	b, _ := json.Marshal(ps[1])
	for _, want := range []string{`"projectName":"m-r1"`, `"onlyAttestedDevices":false`, `"startAt":{"msFromNow":300000}`, `"numberOfReplicas":1`,
		`"includeEnvironmentVariables":["PHONELLM_API_KEY","TUNNEL_KEY"]`, `"maxExecutionTimeInMs":129600000`, `"runtime":"NodeJSWithBundle"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("project lacks %s: %s", want, b)
		}
	}
	if strings.Contains(string(b), "benchmarkFilters") {
		t.Errorf("benchmark filters without a RAM/CPU minimum: %s", b)
	}
}
