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

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/fit"
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

// TestShipDryRun: the acurast target's part of ship. The dry run builds the bundle with the profile's RAM
// floor, plans without signing or recording, and its plan carries what the summary shows (model URL, the
// jobs' lifetime and end, RAM floor, cost). It can be planned with a placeholder URL before publishing and
// with a local test Hub's URL after a local publish; a real deploy refuses a URL phones cannot download.
func TestShipDryRun(t *testing.T) {
	dir := t.TempDir()
	store := deploy.NewStore(filepath.Join(dir, "state"))
	env := map[string]string{}
	f := &Fleet{Store: store, Dir: filepath.Join(dir, "acurast"), Network: "canary", Getenv: func(k string) string { return env[k] }}
	if info := f.Info(); info.Name != Target || !info.Downloads || info.Engine != fit.LlamaCpp {
		t.Fatalf("info %+v", info)
	}
	spec := deploy.Spec{Name: "Fraud 4B", Replicas: 2, Ctx: 4096, Slots: 1, APIKeyEnv: "PHONELLM_API_KEY",
		Model: deploy.ModelRef{ID: "fraud", URL: "https://" + deploy.PlaceholderHost + "/fraud.gguf", Size: 1000, SHA256: strings.Repeat("d", 64)}}
	prof, _ := fit.Builtin().Lookup("16gb")
	rep := &warnings{}
	sh, err := f.Ship(context.Background(), deploy.ShipRequest{Spec: spec, Profile: prof, DryRun: true, Version: "t", Reporter: rep})
	if err != nil {
		t.Fatal(err)
	}
	var p Plan
	if err := json.Unmarshal(sh.Plan, &p); err != nil {
		t.Fatal(err)
	}
	if p.ModelURL != spec.Model.URL || p.LifetimeMS != 86_400_000 || !p.EndAt.Equal(p.StartAt.Add(24*time.Hour)) ||
		p.MinRAMBytes != prof.MinRamTotalBytes() || p.Cost.PerReplicaACU != "0.8" || p.Cost.LockedACU != "1.6" || p.Network != "canary" {
		t.Fatalf("plan %+v", p)
	}
	if sh.Bundle == nil || filepath.Dir(sh.Bundle.Path) != f.Dir || filepath.Base(sh.Bundle.Path) != "fraud-4b-bundle.zip" {
		t.Fatalf("bundle %+v", sh.Bundle)
	}
	if ds, _ := store.List(); len(ds) != 0 || sh.Deployment.State != deploy.StatePlanned || len(sh.Deployment.Replicas) != 2 {
		t.Fatalf("dry run recorded %d deployments; shipment %+v", len(ds), sh.Deployment)
	}
	if len(rep.msgs) != 1 || !strings.Contains(rep.msgs[0], "PHONELLM_API_KEY is not set") {
		t.Fatalf("warnings %q, want one about the unset key variable", rep.msgs)
	}
	env["PHONELLM_API_KEY"] = "sk-set-0123456789"
	rep.msgs = nil
	if _, err := f.Ship(context.Background(), deploy.ShipRequest{Spec: spec, Profile: prof, DryRun: true, Reporter: rep}); err != nil || len(rep.msgs) != 0 {
		t.Fatalf("dry run with the key set: %v, warnings %q", err, rep.msgs)
	}

	// A local test Hub: planned (with a note) but never deployed.
	spec.Model.URL = "http://127.0.0.1:8999/me/fraud/resolve/0123/fraud.gguf"
	sh, err = f.Ship(context.Background(), deploy.ShipRequest{Spec: spec, Profile: prof, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(sh.Plan, &p)
	if !strings.Contains(strings.Join(p.Notes, "\n"), "local test Hub") {
		t.Fatalf("notes %q", p.Notes)
	}
	_, err = f.Ship(context.Background(), deploy.ShipRequest{Spec: spec, Profile: prof})
	if err == nil || !pipeline.IsInputError(err) || !strings.Contains(err.Error(), "not https") || strings.Contains(err.Error(), "publish the model first") {
		t.Fatalf("real deploy from a local test Hub: %v", err)
	}
	// No API key variable: refused before anything is built.
	spec.APIKeyEnv = ""
	if _, err := f.Ship(context.Background(), deploy.ShipRequest{Spec: spec, Profile: prof, DryRun: true}); !pipeline.IsInputError(err) {
		t.Fatalf("no API key variable: %v", err)
	}
}

type warnings struct{ msgs []string }

func (w *warnings) Begin(string, int64) {}
func (w *warnings) Add(int64)           {}
func (w *warnings) End(string, error)   {}
func (w *warnings) Note(l pipeline.Level, m string) {
	if l == pipeline.Warn {
		w.msgs = append(w.msgs, m)
	}
}

func TestErrorClasses(t *testing.T) {
	for op, remote := range map[string]bool{"pin": true, "deploy": true, "stop": true, "estimate": true, "validate": false, "encode-deploy": false} {
		if got := pipeline.IsRemoteError(&SDKError{Op: op, Message: "x"}); got != remote {
			t.Errorf("SDKError{%s}.RemoteError = %v", op, got)
		}
	}
	if err := (Options{Network: "devnet"}).withDefaults(func(string) string { return "" }).Validate(); !pipeline.IsInputError(err) {
		t.Errorf("bad network: %v", err)
	}
}

// TestPhoneCache: status reads the prompt-cache counters the phone entrypoint keeps in /status, and nothing
// from a status that has none or holds nonsense.
func TestPhoneCache(t *testing.T) {
	c := phoneCache([]byte(`{"state":"ready","cache":{"requests":10,"hits":8,"prompt_tokens":70000,"cached_tokens":56700,"hit_rate":0.81}}`))
	if c == nil || c.Requests != 10 || c.Hits != 8 || c.HitRate != 0.81 || c.Source != "replica" {
		t.Fatalf("%+v", c)
	}
	for _, s := range []string{`{"state":"ready"}`, `{"cache":{"requests":1,"prompt_tokens":5,"cached_tokens":9}}`, `{"cache":"x"}`, `[`} {
		if c := phoneCache([]byte(s)); c != nil {
			t.Errorf("%s: %+v", s, c)
		}
	}
}
