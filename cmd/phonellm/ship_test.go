package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/acurast"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// TestShipAcurastDryRun runs the acurast target's dry run from a workspace whose model was published: it builds
// the bundle, writes acurast.json and prints the plan, signs and sends nothing, and leaks no secret.
func TestShipAcurastDryRun(t *testing.T) {
	base := tinyCheckpoint(t, "qwen3")
	dir := t.TempDir()
	t.Setenv("PHONELLM_WORKSPACE", dir)
	t.Setenv("PHONELLM_HOME", t.TempDir())
	const key = "sk-test-secret-key-0123456789"
	t.Setenv("PHONELLM_API_KEY", key)
	if code, _, e := runCLI(t, context.Background(), "init", "--dir", dir, "--base", base, "--name", "tiny"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	if code, _, e := runCLI(t, context.Background(), "quantize", "q4_k_m"); code != 0 {
		t.Fatalf("quantize: %s", e)
	}
	ws, err := workspace.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	art, ok := ws.LatestArtifact("gguf", "quantize")
	if !ok {
		t.Fatal("no quantized artifact recorded")
	}
	// Pretend it was published: ship takes the resolve URL and sha256 from the publish record.
	url := "https://huggingface.co/me/tiny/resolve/0123456789abcdef0123456789abcdef01234567/tiny-Q4_K_M.gguf"
	if err := ws.Record(workspace.Record{Stage: "publish", Key: "p", Artifacts: []pipeline.Artifact{
		{Path: url, Kind: publishedKind, Size: art.Size, SHA256: art.SHA256}}}); err != nil {
		t.Fatal(err)
	}
	code, out, e := runCLI(t, context.Background(), "ship", "--target", "acurast", "--replicas", "2", "--phone", "8gb",
		"--api-key-env", "PHONELLM_API_KEY", "--dry-run", "--json", "--reviews-per-hour", "500", "--prompt-tokens", "1000", "--shared-tokens", "900")
	if code != 0 {
		t.Fatalf("ship --dry-run: %d %s", code, e)
	}
	var res deploy.Result
	var plan acurast.Plan
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Plan == nil || res.Bundle == nil {
		t.Fatalf("result %q (%v)", out, err)
	}
	if err := json.Unmarshal(res.Plan, &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Calls) != 2 || !strings.HasPrefix(plan.Script, "ipfs://") {
		t.Errorf("plan: %d deploy calls, script %q", len(plan.Calls), plan.Script)
	}
	// Issue 17: the capacity plan of the dry run, and the phones' prompt cache sized by the fit check, in the
	// bundle's llama-server arguments.
	if c := res.Capacity; c == nil || c.Profile != "8gb" || c.Replicas.Lo < 1 || c.CostPerHour.Lo <= 0 || len(c.Basis) == 0 {
		t.Errorf("capacity plan %+v", res.Capacity)
	}
	if pc := res.PromptCache; pc == nil || pc.Bytes <= 0 {
		t.Errorf("prompt cache %+v", res.PromptCache)
	} else if bb, err := os.ReadFile(res.Bundle.Path); err == nil {
		_, pcfg, err := deploy.ReadBundle(bb)
		if err != nil || pcfg.CacheRAMMiB != int(pc.Bytes>>20) || !strings.Contains(strings.Join(pcfg.ExtraArgs, " "), "--cache-ram "+strconv.Itoa(pcfg.CacheRAMMiB)) {
			t.Errorf("bundle config %+v (%v), prompt cache %d MiB", pcfg.ExtraArgs, err, pc.Bytes>>20)
		}
	}
	if strings.Contains(out+e, key) {
		t.Error("the API key appears in ship's output")
	}
	cfg, err := os.ReadFile(plan.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(res.Bundle.Path)
	for name, b := range map[string][]byte{"acurast.json": cfg, "bundle": bundle} {
		if strings.Contains(string(b), key) {
			t.Errorf("the API key appears in %s", name)
		}
	}
	if !strings.Contains(string(cfg), "minRamTotalBytes") || !strings.Contains(string(cfg), "7200000000") {
		t.Errorf("acurast.json lacks the 8gb profile's minRamTotalBytes: %s", cfg)
	}
	if filepath.Dir(res.Bundle.Path) != filepath.Join(dir, ".phonellm", "acurast") {
		t.Errorf("bundle at %s", res.Bundle.Path)
	}
}

// shipWorkspace makes a workspace with a quantized tiny model, with fleet state under a fresh PHONELLM_HOME;
// it stops every deployment left when the test ends.
func shipWorkspace(t *testing.T) string {
	t.Helper()
	base := tinyCheckpoint(t, "qwen3")
	dir := t.TempDir()
	home := t.TempDir()
	t.Setenv("PHONELLM_WORKSPACE", dir)
	t.Setenv("PHONELLM_HOME", home)
	t.Setenv(cliSelfEnv, "1")
	if code, _, e := runCLI(t, context.Background(), "init", "--dir", dir, "--base", base, "--name", "tiny"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	if code, _, e := runCLI(t, context.Background(), "quantize", "q4_k_m"); code != 0 {
		t.Fatalf("quantize: %s", e)
	}
	t.Cleanup(func() {
		ds, _ := deploy.NewStore(filepath.Join(home, "fleet")).List()
		for _, d := range ds {
			if d.State != deploy.StateStopped {
				if code, _, e := runCLI(t, context.Background(), "fleet", "stop", d.ID); code != 0 {
					t.Errorf("cleanup: fleet stop %s: %s", d.ID, e)
				}
			}
		}
	})
	return dir
}

func fleetStatus(t *testing.T, id string) deploy.Status {
	t.Helper()
	code, out, e := runCLI(t, context.Background(), "fleet", "status", id, "--json")
	var st deploy.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("fleet status: %d %s %s", code, out, e)
	}
	return st
}

// errorLines returns stderr's "error:" lines.
func errorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "error:") {
			out = append(out, l)
		}
	}
	return out
}

// TestShipLocal is issue 13 item 4 through the command line, as a user hits it:
//   - with the gateway port taken by another server, ship printed that server's URL and answer and exited 0;
//     now it exits 1 with one error line naming the port, prints no result and leaves nothing running;
//   - the same with another deployment (another model) on the port: that deployment keeps serving, the new
//     one is not started;
//   - ship --name X: the first request asked for X while the replicas served the file name (404, exit 1, the
//     deployment left running); now the replicas serve X;
//   - a killed gateway stayed dead while 'fleet status' said ready; now status reports it and the
//     supervisor restarts it.
func TestShipLocal(t *testing.T) {
	shipWorkspace(t)
	ctx := context.Background()

	// Another program answers on the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok","choices":[{"message":{"content":"ANSWER OF ANOTHER DEPLOYMENT"}}]}`))
	})}
	go other.Serve(ln)
	defer other.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	code, out, e := runCLI(t, ctx, "ship", "--replicas", "1", "--gateway-port", port)
	if code != exitFailure || len(errorLines(e)) != 1 || !strings.Contains(errorLines(e)[0], "gateway port "+port) {
		t.Fatalf("ship on a taken port: exit %d, stderr %q", code, e)
	}
	if out != "" || strings.Contains(e, "ANOTHER DEPLOYMENT") {
		t.Fatalf("ship on a taken port printed a result: %q %q", out, e)
	}
	if code, out, _ := runCLI(t, ctx, "fleet", "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("deployments after the failed ship: %s", out)
	}

	// ship --name: the replicas serve that name, the first answer comes through this deployment's gateway.
	// PHONELLM_API_KEY set: replicas, gateway and the first request all use it.
	const key = "sk-test-local-fleet-0123456789"
	t.Setenv("PHONELLM_API_KEY", key)
	code, out, e = runCLI(t, ctx, "ship", "--replicas", "1", "--gateway-port", "0", "--name", "fraud-x", "--json")
	if code != 0 {
		t.Fatalf("ship --name fraud-x: exit %d\n%s", code, e)
	}
	var res deploy.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Answer == "" || res.Model.ID != "fraud-x" || res.Gateway == "" {
		t.Fatalf("ship result %s (%v)", out, err)
	}
	if rec, _ := os.ReadFile(filepath.Join(fleetDir(), "deployments", res.Deployment+".json")); strings.Contains(string(rec), key) || !strings.Contains(string(rec), `"PHONELLM_API_KEY"`) {
		t.Fatalf("deployment record leaks the key or does not name its variable:\n%s", rec)
	}
	// Without the key the gateway refuses.
	if resp, err := http.Get(res.Gateway + "/v1/models"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("gateway without the key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Ready (polled: one health check may time out on a loaded machine).
	st := fleetStatus(t, res.Deployment)
	for deadline := time.Now().Add(60 * time.Second); st.State != deploy.StateReady; st = fleetStatus(t, res.Deployment) {
		if time.Now().After(deadline) {
			t.Fatalf("status after ship: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.Gateway == nil || !st.Gateway.Healthy || st.Gateway.URL != res.Gateway {
		t.Fatalf("status after ship: %+v", st)
	}

	// Another model on that deployment's gateway port: refused, naming the port; the first keeps serving.
	gwPort := strings.TrimPrefix(res.Gateway, "http://127.0.0.1:")
	code, out, e = runCLI(t, ctx, "ship", "--replicas", "1", "--gateway-port", gwPort, "--name", "other-model")
	if code != exitFailure || len(errorLines(e)) != 1 || !strings.Contains(e, "gateway port "+gwPort) || out != "" {
		t.Fatalf("second ship on the same port: exit %d, %q %q", code, out, e)
	}
	if ds, _ := deploy.NewStore(fleetDir()).List(); len(ds) != 1 {
		t.Fatalf("%d deployments recorded, want only the first", len(ds))
	}

	// Kill the gateway: status does not claim ready while it is down, and the supervisor restarts it.
	var det struct {
		PID int `json:"pid"`
	}
	json.Unmarshal(st.Gateway.Detail, &det)
	if det.PID <= 0 {
		t.Fatalf("gateway detail %s", st.Gateway.Detail)
	}
	if err := syscall.Kill(det.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		st = fleetStatus(t, res.Deployment)
		var now struct {
			PID      int `json:"pid"`
			Restarts int `json:"restarts"`
		}
		json.Unmarshal(st.Gateway.Detail, &now)
		if st.State == deploy.StateReady && !st.Gateway.Healthy {
			t.Fatalf("status %s while the gateway is down: %+v", st.State, st.Gateway)
		}
		if st.Gateway.Healthy && now.Restarts == 1 && now.PID != det.PID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway was not restarted: %+v", st.Gateway)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Stop, then prune: the list is empty again.
	if code, _, e := runCLI(t, ctx, "fleet", "stop", res.Deployment); code != 0 {
		t.Fatalf("fleet stop: %s", e)
	}
	code, out, e = runCLI(t, ctx, "fleet", "prune", "--json")
	var pr deploy.PruneResult
	if code != 0 || json.Unmarshal([]byte(out), &pr) != nil || len(pr.Removed) != 1 || pr.Removed[0] != res.Deployment {
		t.Fatalf("fleet prune: %d %s %s", code, out, e)
	}
	if code, out, _ := runCLI(t, ctx, "fleet", "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("fleet list after prune: %s", out)
	}
}

// TestShipAcurastPlanBeforePublish is issue 13 item 8's dry-run defects: the plan can be made before a real
// publish (a placeholder URL, labelled), the unset API-key variable is warned about, and the summary shows
// the jobs' lifetime, cost and RAM floor. Errors are printed once.
func TestShipAcurastPlanBeforePublish(t *testing.T) {
	shipWorkspace(t)
	ctx := context.Background()
	const keyVar = "PHONELLM_TEST_UNSET_API_KEY"
	os.Unsetenv(keyVar)
	code, out, e := runCLI(t, ctx, "ship", "--target", "acurast", "--replicas", "2", "--phone", "16gb", "--api-key-env", keyVar, "--dry-run")
	if code != 0 {
		t.Fatalf("dry run before publish: exit %d\n%s", code, e)
	}
	for _, want := range []string{"acurast plan", "https://" + deploy.PlaceholderHost + "/tiny-Q4_K_M.gguf", "placeholder",
		"lifetime  24 h per job", "RAM floor 14.4", "cost      at most 0.8 ACU per phone, 1.6 ACU locked for 2 phones", keyVar} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(e, "warning") || !strings.Contains(e, keyVar+" is not set") {
		t.Errorf("no warning about the unset %s: %q", keyVar, e)
	}
	// The real ship before publish: one error, naming what to do.
	t.Setenv(keyVar, "sk-test-0123456789abcdef")
	code, out, e = runCLI(t, ctx, "ship", "--target", "acurast", "--replicas", "2", "--api-key-env", keyVar)
	if code == 0 || out != "" || len(errorLines(e)) != 1 || !strings.Contains(e, "phonellm publish") || strings.Count(e, "not on the Hub yet") != 1 {
		t.Fatalf("real ship before publish: exit %d, %q %q", code, out, e)
	}
	// A flag error names the help once.
	code, _, e = runCLI(t, ctx, "ship", "--replicas", "x")
	if code != exitUsage || strings.Count(e, "(see 'phonellm ship --help')") != 1 {
		t.Fatalf("flag error: exit %d, %q", code, e)
	}
	// An unknown --phone is a bad command line here as in fit and quantize auto --fit (exit 2, not 3), one line
	// listing the known profiles, and it is refused before anything is built.
	code, out, e = runCLI(t, ctx, "ship", "--target", "acurast", "--phone", "17gb", "--api-key-env", keyVar, "--dry-run")
	if code != exitUsage || out != "" || len(errorLines(e)) != 1 || !strings.Contains(e, `unknown phone profile "17gb"`) || !strings.Contains(e, "16gb") {
		t.Fatalf("unknown --phone: exit %d, %q %q", code, out, e)
	}
	code, out, e = runCLI(t, ctx, "fit", "--phone", "17gb")
	if code != exitUsage || out != "" || len(errorLines(e)) != 1 || !strings.Contains(e, `unknown phone profile "17gb"`) {
		t.Fatalf("fit, unknown --phone: exit %d, %q %q", code, out, e)
	}
	// The same name in phonellm.yaml is a bad input file (exit 3) that the error names, in fit and in ship.
	yaml := filepath.Join(os.Getenv("PHONELLM_WORKSPACE"), workspace.FileName)
	b, err := os.ReadFile(yaml)
	if err != nil || !strings.Contains(string(b), "phone: 16gb") {
		t.Fatalf("%s: %v\n%s", yaml, err, b)
	}
	if err := os.WriteFile(yaml, []byte(strings.Replace(string(b), "phone: 16gb", "phone: 17gb", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"fit"}, {"ship", "--target", "acurast", "--api-key-env", keyVar, "--dry-run"}} {
		code, out, e = runCLI(t, ctx, args...)
		if code != exitBadInput || out != "" || len(errorLines(e)) != 1 || !strings.Contains(e, yaml+": phone: ") || !strings.Contains(e, `unknown phone profile "17gb"`) {
			t.Errorf("%v with phone: 17gb in %s: exit %d, %q %q", args, workspace.FileName, code, out, e)
		}
	}
}
