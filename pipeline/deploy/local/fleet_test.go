package local

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
)

const testKey = "s3cret-fleet-key-value"

func details(t *testing.T, st deploy.Status) []Detail {
	t.Helper()
	out := make([]Detail, len(st.Replicas))
	for i, r := range st.Replicas {
		if err := json.Unmarshal(r.Detail, &out[i]); err != nil {
			t.Fatalf("replica %d detail %s: %v", i, r.Detail, err)
		}
	}
	return out
}

func waitStatus(t *testing.T, f *Fleet, id, what string, cond func(deploy.Status, []Detail) bool) (deploy.Status, []Detail) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := f.Status(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		ds := details(t, st)
		if cond(st, ds) {
			return st, ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; status %+v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func chat(url, key string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestLifecycle: deploy 3 replicas, read their status from a second Fleet (as another shell would), kill
// one and see the supervisor restart it, then stop from the second Fleet and find no process and a stopped
// record.
func TestLifecycle(t *testing.T) {
	t.Setenv("PHONELLM_TEST_FLEET_KEY", testKey)
	dir := t.TempDir()
	f1 := testFleet(t, dir)
	spec := testSpec(t, 3)
	spec.APIKeyEnv = "PHONELLM_TEST_FLEET_KEY"
	spec.MemoryLimit = 512 << 20
	d := deployT(t, f1, spec)
	if d.Target != Target || len(d.Replicas) != 3 || !strings.HasPrefix(d.ID, "tiny-test-") {
		t.Fatalf("deployment %+v", d)
	}

	f2, err := New(Options{Store: deploy.NewStore(dir)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := f2.Status(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	ds := details(t, st)
	if st.State != deploy.StateReady {
		t.Fatalf("state %s: %+v", st.State, st)
	}
	ports := map[int]bool{}
	for i, r := range st.Replicas {
		dt := ds[i]
		if !r.Healthy || dt.PID <= 0 || r.Ref != strconv.Itoa(dt.PID) || dt.Restarts != 0 || dt.Threads != 2 || dt.StartedAt.IsZero() || dt.RSS <= 0 {
			t.Fatalf("replica %d: %+v %+v", i, r, dt)
		}
		if !strings.Contains(string(dt.Health), `"slots_idle":2`) {
			t.Errorf("replica %d health %s", i, dt.Health)
		}
		ports[dt.Port] = true
		as, err := addressSpaceLimit(dt.PID)
		if err != nil || as != uint64(spec.MemoryLimit+AddressSpaceSlack) {
			t.Errorf("replica %d RLIMIT_AS = %d (%v), want %d", i, as, err, spec.MemoryLimit+AddressSpaceSlack)
		}
	}
	if len(ports) != 3 {
		t.Fatalf("ports %v", ports)
	}
	// The key reaches the replica through the environment only.
	if code, err := chat(st.Replicas[0].URL, testKey); err != nil || code != 200 {
		t.Fatalf("chat with key: %d %v", code, err)
	}
	if code, _ := chat(st.Replicas[0].URL, ""); code != 401 {
		t.Fatalf("chat without key: %d, want 401", code)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "deployments", d.ID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), testKey) || !strings.Contains(string(raw), `"--api-key-env",`) || !strings.Contains(string(raw), `"PHONELLM_TEST_FLEET_KEY"`) {
		t.Fatalf("record leaks the key or lacks --api-key-env:\n%s", raw)
	}

	// Kill replica 1: the supervisor restarts it on the same port.
	old := ds[1]
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, ds = waitStatus(t, f2, d.ID, "replica 1 restarted", func(st deploy.Status, ds []Detail) bool {
		return st.Replicas[1].Healthy && ds[1].Restarts == 1 && ds[1].PID != old.PID
	})
	if ds[1].Port != old.Port || !strings.Contains(ds[1].LastExit, "killed") || ds[0].Restarts != 0 {
		t.Fatalf("after restart: %+v (before %+v)", ds[1], old)
	}
	eps, err := f2.Endpoints(ctx, d.ID)
	if err != nil || len(eps) != 3 || eps[1].URL != st.Replicas[1].URL || eps[0].Slots != 2 || eps[0].APIKeyEnv != spec.APIKeyEnv {
		t.Fatalf("endpoints %+v %v", eps, err)
	}

	// Stop from the second Fleet.
	rec, _ := f2.o.Store.Load(d.ID)
	x, _ := decodeExtra(rec)
	procs := []Proc{x.Supervisor}
	for _, p := range x.Replicas {
		procs = append(procs, p.Proc)
	}
	if err := f2.Stop(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PID == 0 || alive(p) {
			t.Errorf("process %+v survived Stop (or was never recorded)", p)
		}
	}
	st, err = f2.Status(ctx, d.ID)
	if err != nil || st.State != deploy.StateStopped {
		t.Fatalf("status after stop: %+v %v", st, err)
	}
	for _, r := range st.Replicas {
		if r.State != deploy.StateStopped || r.Healthy || r.Ref != "" {
			t.Errorf("replica after stop: %+v", r)
		}
	}
	if _, err := os.Stat(lockPath(f2.o.Store, d.ID)); !os.IsNotExist(err) {
		t.Errorf("lock file left: %v", err)
	}
	if _, err := f2.Endpoints(ctx, d.ID); err == nil {
		t.Error("endpoints of a stopped deployment")
	}
	if err := f2.Stop(ctx, d.ID); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// TestMemoryWatchdog: a replica whose resident memory exceeds the limit is killed and restarted.
func TestMemoryWatchdog(t *testing.T) {
	f := testFleet(t, t.TempDir())
	spec := testSpec(t, 1)
	spec.MemoryLimit = 96 << 20
	d := deployT(t, f, spec)
	st, err := f.Status(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := details(t, st)[0]
	if before.RSS <= 0 || before.RSS > spec.MemoryLimit {
		t.Fatalf("replica starts at RSS %d, limit %d", before.RSS, spec.MemoryLimit)
	}
	resp, err := http.Get(st.Replicas[0].URL + "/debug/alloc?mb=160")
	if err == nil {
		resp.Body.Close()
	}
	_, ds := waitStatus(t, f, d.ID, "restart after the memory kill", func(st deploy.Status, ds []Detail) bool {
		return ds[0].Restarts == 1 && st.Replicas[0].Healthy
	})
	if !strings.Contains(ds[0].LastExit, "resident memory") || ds[0].PID == before.PID {
		t.Fatalf("after the memory kill: %+v", ds[0])
	}
}

// TestSupervisorDies: replicas die with a SIGKILLed supervisor (PR_SET_PDEATHSIG), Status reports the
// deployment failed, and Stop still cleans up.
func TestSupervisorDies(t *testing.T) {
	f := testFleet(t, t.TempDir())
	d := deployT(t, f, testSpec(t, 2))
	rec, _ := f.o.Store.Load(d.ID)
	x, err := decodeExtra(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(x.Supervisor.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, _ := waitStatus(t, f, d.ID, "failed state", func(st deploy.Status, ds []Detail) bool {
		return st.State == deploy.StateFailed && ds[0].PID == 0 && ds[1].PID == 0
	})
	if !strings.Contains(st.Replicas[0].Error, "supervisor") {
		t.Fatalf("error %q", st.Replicas[0].Error)
	}
	for _, p := range x.Replicas {
		if alive(p.Proc) {
			t.Fatalf("replica %d outlived its supervisor", p.Index)
		}
	}
	// Resume brings it back under a new supervisor.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.Resume(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitReady(ctx, d.ID, 0); err != nil {
		t.Fatal(err)
	}
	rec, _ = f.o.Store.Load(d.ID)
	if x2, _ := decodeExtra(rec); x2.Supervisor.PID == x.Supervisor.PID || !alive(x2.Supervisor) {
		t.Fatalf("supervisor after resume %+v (before %+v)", x2.Supervisor, x.Supervisor)
	}
	if err := f.Stop(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Status(ctx, d.ID); st.State != deploy.StateStopped {
		t.Fatalf("after stop: %s", st.State)
	}
	if err := f.Resume(ctx, d.ID); err == nil {
		t.Fatal("resumed a stopped deployment")
	}
}

func TestDeployErrors(t *testing.T) {
	f := testFleet(t, t.TempDir())
	ctx := context.Background()
	spec := testSpec(t, 1)
	spec.Model.Size++
	if _, err := f.Deploy(ctx, spec); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("wrong size: %v", err)
	}
	spec = testSpec(t, 1)
	spec.Model.Path = ""
	spec.Model.URL = "https://example.invalid/x.gguf"
	if _, err := f.Deploy(ctx, spec); err == nil || !strings.Contains(err.Error(), "model.path") {
		t.Errorf("no path: %v", err)
	}
	spec = testSpec(t, 1)
	spec.APIKeyEnv = "PHONELLM_TEST_UNSET_KEY"
	if _, err := f.Deploy(ctx, spec); err == nil || !strings.Contains(err.Error(), "PHONELLM_TEST_UNSET_KEY") {
		t.Errorf("unset key variable: %v", err)
	}
	t.Setenv("PHONELLM_TEST_PADDED_KEY", "key\n") // serve would refuse it: the replicas would never start
	spec.APIKeyEnv = "PHONELLM_TEST_PADDED_KEY"
	if _, err := f.Deploy(ctx, spec); err == nil || !strings.Contains(err.Error(), "PHONELLM_TEST_PADDED_KEY") {
		t.Errorf("whitespace-padded key variable: %v", err)
	}
	// A supervisor that cannot start is reported with its log, and the record says failed.
	bad, _ := New(Options{Store: f.o.Store, Supervisor: func(string, string) ([]string, error) {
		return []string{"/bin/sh", "-c", "echo supervisor exploded >&2; exit 3"}, nil
	}})
	d, err := bad.Deploy(ctx, testSpec(t, 1))
	if err == nil || !strings.Contains(err.Error(), "supervisor exploded") || d.State != deploy.StateFailed {
		t.Errorf("bad supervisor: %v, state %s", err, d.State)
	}
}

func TestDefaultCommand(t *testing.T) {
	argv, err := DefaultCommand(deploy.Spec{}, Plan{Host: "127.0.0.1", Port: 8081, Threads: 2, Slots: 3, Ctx: 4096, Batch: 256, Model: "/m.gguf", APIKeyEnv: "K"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"serve", "/m.gguf", "--port", "8081", "--threads", "2", "--parallel", "3", "--host", "127.0.0.1",
		"--ctx", "4096", "--batch", "256", "--api-key-env", "K"}
	if !slices.Equal(argv[1:], want) {
		t.Fatalf("argv %q", argv)
	}
	sv, _ := DefaultSupervisor("/state", "id-1")
	if !slices.Equal(sv[1:], []string{"fleet", "supervise", "--state-dir", "/state", "id-1"}) {
		t.Fatalf("supervisor argv %q", sv)
	}
	// The replicas serve the model under the spec's name (ship --name), like llama-server's --alias.
	argv, _ = DefaultCommand(deploy.Spec{Model: deploy.ModelRef{ID: "fraud-x"}}, Plan{Host: "127.0.0.1", Port: 1, Threads: 1, Slots: 1, Model: "/m.gguf"})
	if i := slices.Index(argv, "--alias"); i < 0 || argv[i+1] != "fraud-x" {
		t.Fatalf("argv without the alias: %q", argv)
	}
	gw, _ := DefaultGateway("/state", "id-1", GatewayPlan{Port: 8090, Identity: "abc", APIKeyEnv: "K"})
	if !slices.Equal(gw[1:], []string{"gateway", "--deployment", "id-1", "--state-dir", "/state", "--listen-fd", "3", "--identity", "abc", "--api-key-env", "K"}) {
		t.Fatalf("gateway argv %q", gw)
	}
}
