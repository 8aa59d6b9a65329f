package local

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/fit"
)

var shipClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}

func shipT(t *testing.T, f *Fleet, spec deploy.Spec) deploy.Deployment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard only
	defer cancel()
	sh, err := f.Ship(ctx, deploy.ShipRequest{Spec: spec, Profile: fit.Profile{Name: "test", UsableBytes: 1 << 30}, ReadyTimeout: 45 * time.Second})
	if sh.Deployment.ID != "" {
		t.Cleanup(func() {
			if err := f.Stop(context.Background(), sh.Deployment.ID); err != nil {
				t.Errorf("cleanup stop: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return sh.Deployment
}

func gatewayDetail(t *testing.T, st deploy.Status) Detail {
	t.Helper()
	if st.Gateway == nil {
		t.Fatalf("status without a gateway: %+v", st)
	}
	var d Detail
	if err := json.Unmarshal(st.Gateway.Detail, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestShipGatewaySupervised is issue 13 item 4's supervision defects: the gateway is one of the supervised
// processes. It serves the model under the spec's name (the replicas get --alias), it answers with the
// deployment's identity, status is not "ready" while it does not answer, and a killed gateway is restarted
// on the same socket. Before, the gateway was a detached process nobody watched: killed, it stayed dead
// while 'fleet status' said ready, and ship --name X left replicas serving another name (404).
func TestShipGatewaySupervised(t *testing.T) {
	t.Setenv("PHONELLM_TEST_FLEET_KEY", testKey)
	f := testFleet(t, t.TempDir())
	spec := testSpec(t, 2)
	spec.Model.ID = "fraud-alias"
	spec.APIKeyEnv = "PHONELLM_TEST_FLEET_KEY"
	d := shipT(t, f, spec)
	gw := d.Gateway
	if gw == nil || gw.Identity == "" || !strings.HasPrefix(gw.URL, "http://127.0.0.1:") {
		t.Fatalf("deployment gateway %+v", gw)
	}
	ctx := context.Background()
	ans, _, err := deploy.FirstAnswer(ctx, shipClient, *gw, "fraud-alias", "is this fraud?", testKey)
	if err != nil || ans == "" {
		t.Fatalf("first answer under the alias: %q %v", ans, err)
	}
	st, _ := waitStatus(t, f, d.ID, "ready", func(st deploy.Status, _ []Detail) bool {
		return st.State == deploy.StateReady && st.Gateway != nil && st.Gateway.Healthy
	})
	before := gatewayDetail(t, st)
	if before.PID <= 0 || before.Restarts != 0 {
		t.Fatalf("gateway detail %+v", before)
	}

	// A gateway that does not answer (stopped): not ready, whatever its replicas say.
	if err := syscall.Kill(before.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// kill returns before every thread has stopped: wait for the stopped state ('T') the kernel reports.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if st, _, err := procStat(before.PID); err == nil && st == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not stop")
		}
	}
	st, err = f.Status(ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State == deploy.StateReady || st.Gateway.Healthy || st.Gateway.Error == "" {
		t.Fatalf("status with the gateway not answering: state %s, gateway %+v", st.State, st.Gateway)
	}

	// Killed: the supervisor starts a new gateway on the same socket, with the same identity.
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err = f.Status(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if g := gatewayDetail(t, st); st.Gateway.Healthy && g.Restarts == 1 && g.PID != before.PID && st.State == deploy.StateReady {
			if !strings.Contains(g.LastExit, "killed") {
				t.Errorf("last exit %q", g.LastExit)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway was not restarted: %+v", st.Gateway)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.Gateway.URL != gw.URL || st.Gateway.Identity != gw.Identity {
		t.Fatalf("restarted gateway %+v, was %+v", st.Gateway.Gateway, *gw)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; {
		ans, _, err = deploy.FirstAnswer(ctx, shipClient, *gw, "fraud-alias", "again", testKey)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the restarted gateway: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Stop takes the gateway down with the replicas.
	rec, _ := f.o.Store.Load(d.ID)
	x, _ := decodeExtra(rec)
	if err := f.Stop(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if alive(x.Gateway.Proc) {
		t.Fatal("the gateway survived Stop")
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(gw.URL, "http://"), time.Second); err == nil {
		t.Fatal("the gateway's port still accepts connections after Stop")
	}
}

// TestShipGatewayPortInUse: with the gateway port taken (here by a server answering like another
// deployment's gateway), ship fails at once naming the port, starts nothing and records nothing. Before, it
// started replicas and a gateway that failed to bind, and reported the other server's URL and answer.
func TestShipGatewayPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"choices":[{"message":{"content":"ANSWER OF ANOTHER DEPLOYMENT"}}]}`))
	})}
	go other.Serve(ln)
	defer other.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	f := testFleetPort(t, dir, port)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh, err := f.Ship(ctx, deploy.ShipRequest{Spec: testSpec(t, 2), Profile: fit.Profile{UsableBytes: 1 << 30}, ReadyTimeout: 20 * time.Second})
	var pe *deploy.PortInUseError
	if !errors.As(err, &pe) || pe.Port != port || !strings.Contains(err.Error(), strconv.Itoa(port)) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("ship on a taken port: %v", err)
	}
	if sh.Deployment.ID != "" || sh.Deployment.Gateway != nil {
		t.Fatalf("shipment %+v", sh)
	}
	ds, err := f.o.Store.List()
	if err != nil || len(ds) != 0 {
		t.Fatalf("deployments recorded after a failed ship: %v %v", ds, err)
	}
	if _, err := os.Stat(dir + "/local"); !os.IsNotExist(err) {
		t.Fatalf("run folder created: %v", err)
	}
}

// TestShipStopsWhatFailed: replicas that keep exiting make ship fail early (not after the whole timeout),
// naming the replica and its log, and the deployment is stopped: nothing is left running.
func TestShipStopsWhatFailed(t *testing.T) {
	dir := t.TempDir()
	exe, _ := os.Executable()
	f, err := New(Options{Store: deploy.NewStore(dir),
		Command: func(spec deploy.Spec, p Plan) ([]string, error) {
			return []string{"/bin/sh", "-c", "echo cannot load the model >&2; exit 3"}, nil
		},
		Supervisor: func(dir, id string) ([]string, error) { return []string{exe, roleSupervisor, dir, id}, nil },
		Gateway: func(dir, id string, g GatewayPlan) ([]string, error) {
			argv, _ := DefaultGateway(dir, id, g)
			argv[0], argv[1] = exe, roleGateway
			return argv, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sh, err := f.Ship(ctx, deploy.ShipRequest{Spec: testSpec(t, 1), ReadyTimeout: 45 * time.Second})
	var fe *deploy.FleetError
	if !errors.As(err, &fe) || !pipeline.IsRemoteError(err) || !strings.Contains(err.Error(), "replica 0 exited") ||
		!strings.Contains(err.Error(), "replica-0.log") || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("ship of crashing replicas: %v", err)
	}
	st, err := f.Status(context.Background(), sh.Deployment.ID)
	if err != nil || st.State != deploy.StateStopped {
		t.Fatalf("after the failed ship: %+v %v", st, err)
	}
	rec, _ := f.o.Store.Load(sh.Deployment.ID)
	x, _ := decodeExtra(rec)
	if x.Supervisor.PID != 0 || alive(x.Gateway.Proc) {
		t.Fatalf("left running: supervisor %+v gateway %+v", x.Supervisor, x.Gateway.Proc)
	}
}

// TestPrune: prune removes stopped deployments (record and logs) and keeps running ones; --all also
// removes a deployment whose supervisor died.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	f := testFleet(t, dir)
	running := deployT(t, f, testSpec(t, 1))
	stopped := deployT(t, f, testSpec(t, 1))
	dead := deployT(t, f, testSpec(t, 1))
	ctx := context.Background()
	if err := f.Stop(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	rec, _ := f.o.Store.Load(dead.ID)
	x, _ := decodeExtra(rec)
	if err := syscall.Kill(x.Supervisor.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, f, dead.ID, "failed", func(st deploy.Status, _ []Detail) bool { return st.State == deploy.StateFailed })
	targets := map[string]deploy.Fleet{Target: f}

	res, err := deploy.Prune(ctx, f.o.Store, deploy.PruneOptions{Targets: targets, OlderThan: time.Hour})
	if err != nil || len(res.Removed) != 0 {
		t.Fatalf("prune --older-than 1h removed %v (%v)", res.Removed, err)
	}
	res, err = deploy.Prune(ctx, f.o.Store, deploy.PruneOptions{Targets: targets})
	if err != nil || !slices.Equal(res.Removed, []string{stopped.ID}) {
		t.Fatalf("prune removed %v, want only the stopped %s (%v)", res.Removed, stopped.ID, err)
	}
	if _, err := os.Stat(runDir(f.o.Store, stopped.ID)); !os.IsNotExist(err) {
		t.Errorf("logs of the pruned deployment left: %v", err)
	}
	res, err = deploy.Prune(ctx, f.o.Store, deploy.PruneOptions{Targets: targets, All: true})
	if err != nil || !slices.Equal(res.Removed, []string{dead.ID}) || !slices.Equal(res.Kept, []string{running.ID}) {
		t.Fatalf("prune --all: removed %v kept %v (%v)", res.Removed, res.Kept, err)
	}
	if st, err := f.Status(ctx, running.ID); err != nil || st.State != deploy.StateReady {
		t.Fatalf("the running deployment after prune: %+v %v", st, err)
	}
	if _, err := f.o.Store.Load(dead.ID); !errors.Is(err, deploy.ErrNotFound) {
		t.Fatalf("pruned record still loads: %v", err)
	}
}

// TestResumeRebindsGateway: when the supervisor dies, its processes die with it and the gateway's socket
// closes; Resume's new supervisor binds the recorded port again and the gateway answers there with the
// deployment's identity.
func TestResumeRebindsGateway(t *testing.T) {
	f := testFleet(t, t.TempDir())
	d := shipT(t, f, testSpec(t, 1))
	rec, _ := f.o.Store.Load(d.ID)
	x, _ := decodeExtra(rec)
	if err := syscall.Kill(x.Supervisor.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, f, d.ID, "failed", func(st deploy.Status, _ []Detail) bool {
		return st.State == deploy.StateFailed && !alive(x.Gateway.Proc)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := f.Resume(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitReady(ctx, d.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := deploy.FirstAnswer(ctx, shipClient, *d.Gateway, "tiny", "hello again", ""); err != nil {
		t.Fatalf("through the resumed gateway at %s: %v", d.Gateway.URL, err)
	}
}

// TestStatusHitRate: status reports each replica's prompt-cache hit rate as the deployment's gateway counted
// what the replicas reported: five reviews of one rubric through the gateway, the first a miss and the others
// hits on the replica that holds it.
func TestStatusHitRate(t *testing.T) {
	t.Setenv("PHONELLM_TEST_FLEET_KEY", testKey)
	f := testFleet(t, t.TempDir())
	spec := testSpec(t, 2)
	spec.APIKeyEnv = "PHONELLM_TEST_FLEET_KEY"
	d := shipT(t, f, spec)
	rubric := "Rubric: weigh the evidence and answer with RISK_LEVEL from one to five."
	for i := range 5 {
		body := `{"model":"tiny","max_tokens":4,"messages":[{"role":"system","content":"` + rubric + `"},{"role":"user","content":"case ` + strconv.Itoa(i) + `"}]}`
		req, _ := http.NewRequest(http.MethodPost, d.Gateway.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := shipClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("review %d: HTTP %d", i, resp.StatusCode)
		}
	}
	st, err := f.Status(context.Background(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	var requests, hits int64
	for _, r := range st.Replicas {
		if r.Cache == nil || r.Cache.Source != "gateway" {
			t.Fatalf("replica %d has no cache counts: %+v", r.Index, r)
		}
		requests += r.Cache.Requests
		hits += r.Cache.Hits
	}
	if requests != 5 || hits != 4 {
		t.Fatalf("status counts %d answers, %d hits; want 5 and 4 (%+v / %+v)", requests, hits, st.Replicas[0].Cache, st.Replicas[1].Cache)
	}
	// Without the key the gateway's metrics stay closed: status still works, without hit rates.
	t.Setenv("PHONELLM_TEST_FLEET_KEY", "")
	st, err = f.Status(context.Background(), d.ID)
	if err != nil || st.Replicas[0].Cache != nil {
		t.Fatalf("status without the key: %v, cache %+v", err, st.Replicas[0].Cache)
	}
}
