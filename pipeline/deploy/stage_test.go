package deploy_test

// Tests of Run, the ship stage, against an in-memory target: what Run checks before it ships (fit, digest,
// the model URL phones download from), what it verifies after (the first answer must come from the gateway
// the target started, by its identity), that it stops what was started when it gives up, and what it records.
// The process-level behaviour of the local target (supervision, gateway socket, restarts) is tested in
// deploy/local.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// tinyGGUF converts a generated tiny Qwen3 checkpoint to an F16 GGUF: a real file for the fit check.
func tinyGGUF(t *testing.T) string {
	t.Helper()
	spec, ok := tinymodel.Preset("qwen3")
	if !ok {
		t.Fatal("no qwen3 preset")
	}
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	if err := tinymodel.Generate(ckpt, spec); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tiny-F16.gguf")
	if _, err := convert.Run(context.Background(), convert.Options{Model: ckpt, OutType: convert.OutF16, Out: out}, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fakeTarget records what Run asks of it; ship decides the outcome.
type fakeTarget struct {
	info    deploy.TargetInfo
	ship    func(req deploy.ShipRequest) (deploy.Shipment, error)
	reqs    []deploy.ShipRequest
	stopped []string
}

func (f *fakeTarget) Info() deploy.TargetInfo { return f.info }
func (f *fakeTarget) Ship(ctx context.Context, req deploy.ShipRequest) (deploy.Shipment, error) {
	f.reqs = append(f.reqs, req)
	return f.ship(req)
}
func (f *fakeTarget) Deploy(context.Context, deploy.Spec) (deploy.Deployment, error) {
	return deploy.Deployment{}, errors.New("fake: Deploy is not how Run ships")
}
func (f *fakeTarget) Status(context.Context, string) (deploy.Status, error) {
	return deploy.Status{}, nil
}
func (f *fakeTarget) Endpoints(context.Context, string) ([]deploy.Endpoint, error) {
	return nil, nil
}
func (f *fakeTarget) Stop(_ context.Context, id string) error {
	f.stopped = append(f.stopped, id)
	return nil
}

// gatewayServer answers chat requests as a gateway with the given identity ("" sends none).
func gatewayServer(t *testing.T, identity, answer string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if identity != "" {
			w.Header().Set(deploy.GatewayIdentityHeader, identity)
		}
		var req struct{ Model string }
		json.NewDecoder(r.Body).Decode(&req)
		if r.URL.Path != "/v1/chat/completions" || req.Model == "" {
			http.Error(w, "bad request", 400)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"model": req.Model,
			"choices": []map[string]any{{"message": map[string]string{"role": "assistant", "content": answer}}}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// localLike ships like the local target: one recorded deployment with the given gateway.
func localLike(gw deploy.Gateway) *fakeTarget {
	return &fakeTarget{info: deploy.TargetInfo{Name: "local", Engine: fit.GoEngine},
		ship: func(req deploy.ShipRequest) (deploy.Shipment, error) {
			return deploy.Shipment{Deployment: deploy.Deployment{ID: "dep-1", Target: "local", Spec: req.Spec, Gateway: &gw,
				Replicas: []deploy.Replica{{Index: 0, URL: "http://127.0.0.1:1", State: deploy.StateReady}}}}, nil
		}}
}

// TestRunFirstAnswerFromItsOwnGateway is issue 13 item 4's first defect at the stage level: an answer from a
// server that is not the deployment's gateway (another deployment on the port) is a failure, never reported
// as the answer, and the deployment is stopped; the answer of its own gateway is reported and recorded.
func TestRunFirstAnswerFromItsOwnGateway(t *testing.T) {
	model := tinyGGUF(t)
	other := gatewayServer(t, "someone-else", "ANSWER OF ANOTHER DEPLOYMENT")
	tg := localLike(deploy.Gateway{URL: other.URL, Identity: "mine"})
	res, err := deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, Phone: "8gb"}, nil)
	var idErr *deploy.IdentityError
	if err == nil || !errors.As(err, &idErr) || !pipeline.IsRemoteError(err) {
		t.Fatalf("answer from another gateway: err %v (want an IdentityError, classified remote)", err)
	}
	if res.Answer != "" || res.Gateway != "" || strings.Contains(err.Error(), "ANSWER OF ANOTHER") {
		t.Fatalf("the other deployment's answer leaked: %+v / %v", res, err)
	}
	if len(tg.stopped) != 1 || tg.stopped[0] != "dep-1" {
		t.Fatalf("stopped %v, want the deployment stopped after the failed check", tg.stopped)
	}
	// No identity header at all: the same.
	anon := gatewayServer(t, "", "anonymous")
	if _, err := deploy.Run(context.Background(), deploy.Options{Target: localLike(deploy.Gateway{URL: anon.URL, Identity: "mine"}), Model: model}, nil); !errors.As(err, &idErr) {
		t.Fatalf("answer without identity: %v", err)
	}

	// Its own gateway: the answer is reported, the spec carries the alias, the workspace gets the record.
	ws, err := workspace.Init(t.TempDir(), workspace.Project{Name: "tiny", Phone: "12gb"}, false)
	if err != nil {
		t.Fatal(err)
	}
	own := gatewayServer(t, "mine", "hello from the fleet")
	tg = localLike(deploy.Gateway{URL: own.URL, Identity: "mine"})
	res, err = deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, Workspace: ws, Name: "fraud-x", Replicas: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "hello from the fleet" || res.Gateway != own.URL || res.Deployment != "dep-1" || res.LatencyMS <= 0 || len(tg.stopped) != 0 {
		t.Fatalf("result %+v, stopped %v", res, tg.stopped)
	}
	req := tg.reqs[0]
	if req.Spec.Name != "fraud-x" || req.Spec.Model.ID != "fraud-x" || req.Spec.Replicas != 2 || req.Profile.Name != "12gb" ||
		req.Spec.Model.Path != model || req.Spec.Model.SHA256 != fileSHA(t, model) || req.Spec.Ctx != 4096 || req.Spec.Slots != 1 {
		t.Fatalf("ship request %+v", req)
	}
	ws2, _ := workspace.Open(ws.Root)
	r := ws2.Latest("ship")
	if r == nil || r.Options["deployment"] != "dep-1" || r.Options["gateway"] != own.URL || r.Options["target"] != "local" {
		t.Fatalf("ship record %+v", r)
	}
}

func TestRunFitCheck(t *testing.T) {
	model := tinyGGUF(t)
	tg := localLike(deploy.Gateway{})
	_, err := deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, Phone: "6gb", Ctx: 262144, Parallel: 256}, nil)
	var nf *deploy.NotFitError
	if !errors.As(err, &nf) || !pipeline.IsCheckFailed(err) || nf.Fit.Verdict.Fits {
		t.Fatalf("a model that does not fit: %v", err)
	}
	if len(tg.reqs) != 0 {
		t.Fatal("shipped a model that does not fit")
	}
	if !strings.Contains(err.Error(), "does not fit a 6gb phone at ctx 262144 × 256 slots") {
		t.Errorf("message %q", err)
	}
	// --force ships it, with a warning.
	srv := gatewayServer(t, "g", "ok")
	tg = localLike(deploy.Gateway{URL: srv.URL, Identity: "g"})
	rep := &noteRecorder{}
	if _, err := deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, Phone: "6gb", Ctx: 262144, Parallel: 256, Force: true}, rep); err != nil {
		t.Fatal(err)
	}
	if len(tg.reqs) != 1 || !strings.Contains(strings.Join(rep.warnings, "\n"), "shipping anyway because of --force") {
		t.Fatalf("forced ship: %d requests, warnings %q", len(tg.reqs), rep.warnings)
	}
}

type noteRecorder struct{ warnings []string }

func (r *noteRecorder) Begin(string, int64) {}
func (r *noteRecorder) Add(int64)           {}
func (r *noteRecorder) End(string, error)   {}
func (r *noteRecorder) Note(l pipeline.Level, msg string) {
	if l == pipeline.Warn {
		r.warnings = append(r.warnings, msg)
	}
}

// phoneLike ships like the acurast target: it downloads the model by URL and plans on a dry run.
func phoneLike() *fakeTarget {
	return &fakeTarget{info: deploy.TargetInfo{Name: "acurast", Engine: fit.LlamaCpp, Downloads: true},
		ship: func(req deploy.ShipRequest) (deploy.Shipment, error) {
			plan, _ := json.Marshal(map[string]string{"model_url": req.Spec.Model.URL})
			return deploy.Shipment{Deployment: deploy.Deployment{ID: "plan-1", Target: "acurast", Spec: req.Spec}, Plan: plan}, nil
		}}
}

// TestRunModelURL: phones download the model from the URL publish recorded. A dry run can be planned before
// any publish (a placeholder URL, labelled) and after a publish to a local test Hub (labelled); a real ship
// needs the published https URL, and says "publish" only when there is no publish.
func TestRunModelURL(t *testing.T) {
	model := tinyGGUF(t)
	sum := fileSHA(t, model)
	ws, err := workspace.Init(t.TempDir(), workspace.Project{Name: "tiny"}, false)
	if err != nil {
		t.Fatal(err)
	}
	run := func(dry bool) (deploy.Result, *fakeTarget, error) {
		tg := phoneLike()
		res, err := deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, Workspace: ws, APIKeyEnv: "PHONELLM_API_KEY", DryRun: dry}, nil)
		return res, tg, err
	}

	// Not published: the dry run plans with a placeholder that can never resolve; the real ship refuses.
	res, tg, err := run(true)
	if err != nil {
		t.Fatal(err)
	}
	u := tg.reqs[0].Spec.Model.URL
	if !strings.HasPrefix(u, "https://"+deploy.PlaceholderHost+"/") || !strings.HasSuffix(u, "/tiny-F16.gguf") ||
		tg.reqs[0].Spec.Model.Path != "" || !strings.Contains(res.ModelURLNote, "placeholder") || !tg.reqs[0].DryRun {
		t.Fatalf("dry run before publish: url %q, note %q", u, res.ModelURLNote)
	}
	if res.Plan == nil || ws.Latest("ship") != nil {
		t.Fatalf("dry run: plan %s, ship record %+v (a dry run records nothing)", res.Plan, ws.Latest("ship"))
	}
	_, tg, err = run(false)
	var np *deploy.NotPublishedError
	if !errors.As(err, &np) || !strings.Contains(err.Error(), "phonellm publish") || len(tg.reqs) != 0 {
		t.Fatalf("real ship before publish: %v", err)
	}

	// Published to a local test Hub (http on loopback): the dry run plans with it, labelled; the real ship
	// refuses it without telling the user to publish (they did).
	local := "http://127.0.0.1:8999/me/tiny/resolve/0123/tiny-F16.gguf"
	if err := ws.Record(workspace.Record{Stage: "publish", Key: "p1", Artifacts: []pipeline.Artifact{{Path: local, Kind: deploy.HubFileKind, Size: 1, SHA256: sum}}}); err != nil {
		t.Fatal(err)
	}
	res, tg, err = run(true)
	if err != nil || tg.reqs[0].Spec.Model.URL != local || !strings.Contains(res.ModelURLNote, "test Hub") {
		t.Fatalf("dry run after a local publish: %v, url %q, note %q", err, tg.reqs[0].Spec.Model.URL, res.ModelURLNote)
	}
	_, _, err = run(false)
	if err == nil || strings.Contains(err.Error(), "publish' first") || !strings.Contains(err.Error(), local) || !pipeline.IsInputError(err) {
		t.Fatalf("real ship after a local publish: %v", err)
	}

	// Published over https: used as is, no label.
	hub := "https://huggingface.co/me/tiny/resolve/0123/tiny-F16.gguf"
	if err := ws.Record(workspace.Record{Stage: "publish", Key: "p2", Artifacts: []pipeline.Artifact{{Path: hub, Kind: deploy.HubFileKind, Size: 1, SHA256: sum}}}); err != nil {
		t.Fatal(err)
	}
	res, tg, err = run(true)
	if err != nil || tg.reqs[0].Spec.Model.URL != hub || res.ModelURLNote != "" {
		t.Fatalf("dry run after publish: %v %q %q", err, tg.reqs[0].Spec.Model.URL, res.ModelURLNote)
	}
}

// TestDigest: the workspace's record of a file is used only while it still describes the file.
func TestDigest(t *testing.T) {
	dir := t.TempDir()
	ws, err := workspace.Init(dir, workspace.Project{Name: "x"}, false)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(path, []byte("first version"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(path, old, old)
	recorded := strings.Repeat("7", 64) // not the file's hash: proves the record was used
	if err := ws.Record(workspace.Record{Stage: "quantize", Key: "k", Artifacts: []pipeline.Artifact{{Path: path, Kind: "gguf", Size: 13, SHA256: recorded}}}); err != nil {
		t.Fatal(err)
	}
	n, sum, err := deploy.Digest(ws, path)
	if err != nil || n != 13 || sum != recorded {
		t.Fatalf("digest with a valid record: %d %s %v", n, sum, err)
	}
	// Rewritten after the record (same size): hashed again.
	if err := os.WriteFile(path, []byte("other version"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	os.Chtimes(path, future, future)
	if n, sum, err = deploy.Digest(ws, path); err != nil || sum != fileSHA(t, path) || n != 13 {
		t.Fatalf("digest of a file newer than its record: %d %s %v", n, sum, err)
	}
	if _, _, err := deploy.Digest(nil, dir); !pipeline.IsInputError(err) {
		t.Fatalf("digest of a folder: %v", err)
	}
}
