package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/runtime/gateway"
)

// Plan is what one replica is started with; Options.Command turns it into a command line.
type Plan struct {
	Index   int
	Host    string // always loopback
	Port    int
	Threads int
	Slots   int
	Ctx     int    // per slot; 0 = the server's default
	Batch   int    // 0 = the server's default
	Flash   bool   // fused attention
	Model   string // absolute path of the GGUF
	// APIKeyEnv names the variable the replica reads its API key from (the value never appears on a
	// command line or in a record).
	APIKeyEnv string
}

// Options configure a Fleet.
type Options struct {
	// Store keeps the deployment records (required); replica logs and the supervisor lock go under
	// Store.Dir/local/<id>.
	Store *deploy.Store
	// Command returns a replica's command line (argv[0] is the program). Nil means DefaultCommand.
	Command func(spec deploy.Spec, p Plan) ([]string, error)
	// Supervisor returns the command line that runs Supervise for deployment id with state folder dir,
	// detached from the caller. Nil means DefaultSupervisor.
	Supervisor func(dir, id string) ([]string, error)
	// Gateway returns the command line of a deployment's gateway (the process finds its listening socket at
	// file descriptor ListenFD). Nil means DefaultGateway.
	Gateway func(dir, id string, g GatewayPlan) ([]string, error)
	// GatewayPort is the port of the gateway Ship runs in front of the replicas; 0 picks a free one.
	GatewayPort int
	// Cores shared by the replicas (default: runtime.NumCPU()); each gets max(1, Cores/Replicas) threads
	// unless the spec sets Threads.
	Cores int
	// BasePort, when set, gives replica i port BasePort+i; 0 picks free loopback ports.
	BasePort int
	// StartTimeout bounds the wait for the supervisor to take over in Deploy (default 15 s); StopTimeout
	// bounds the graceful part of Stop (default 20 s).
	StartTimeout, StopTimeout time.Duration
	// Client makes the health checks of Status (default: 2 s timeout, no proxy).
	Client *http.Client
}

// Fleet runs replicas of `phonellm serve` on this machine. Its methods work from any process that shares the
// state folder: Deploy starts a detached supervisor, which owns the replica processes; Status, Endpoints and
// Stop read the records and talk to the processes.
type Fleet struct {
	o Options
}

var _ deploy.Fleet = (*Fleet)(nil)

// New returns a Fleet.
func New(o Options) (*Fleet, error) {
	if o.Store == nil || o.Store.Dir == "" {
		return nil, errors.New("local: Options.Store with a state folder is required")
	}
	if o.Command == nil {
		o.Command = DefaultCommand
	}
	if o.Supervisor == nil {
		o.Supervisor = DefaultSupervisor
	}
	if o.Gateway == nil {
		o.Gateway = DefaultGateway
	}
	if o.GatewayPort < 0 || o.GatewayPort > 65535 {
		return nil, fmt.Errorf("local: gateway port %d out of range", o.GatewayPort)
	}
	if o.Cores <= 0 {
		o.Cores = runtime.NumCPU()
	}
	if o.BasePort < 0 || o.BasePort > 65535-deploy.MaxReplicas {
		return nil, fmt.Errorf("local: base port %d out of range", o.BasePort)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 15 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 20 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	}
	return &Fleet{o: o}, nil
}

// DefaultCommand runs this executable's serve command: `serve MODEL --port P --threads T --parallel S --host
// 127.0.0.1 [--alias ID] [--ctx C] [--batch B] [--flash-attn] [--api-key-env NAME] [--kv-type T] [--warm
// FILE...]`. The alias is the spec's model ID, so the replicas serve the model under the name clients (and the
// gateway) ask for; each replica warms the spec's shared prefixes before it reports ready.
func DefaultCommand(spec deploy.Spec, p Plan) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("local: find the phonellm executable: %w", err)
	}
	argv := []string{exe, "serve", p.Model, "--port", strconv.Itoa(p.Port), "--threads", strconv.Itoa(p.Threads),
		"--parallel", strconv.Itoa(p.Slots), "--host", p.Host}
	if spec.Model.ID != "" {
		argv = append(argv, "--alias", spec.Model.ID)
	}
	if p.Ctx > 0 {
		argv = append(argv, "--ctx", strconv.Itoa(p.Ctx))
	}
	if p.Batch > 0 {
		argv = append(argv, "--batch", strconv.Itoa(p.Batch))
	}
	if p.Flash {
		argv = append(argv, "--flash-attn")
	}
	if p.APIKeyEnv != "" {
		argv = append(argv, "--api-key-env", p.APIKeyEnv)
	}
	if spec.KVType != "" && spec.KVType != "f16" {
		argv = append(argv, "--kv-type", spec.KVType)
	}
	for _, w := range spec.Warm {
		argv = append(argv, "--warm", w)
	}
	return argv, nil
}

// DefaultSupervisor runs `phonellm fleet supervise --state-dir DIR ID` from this executable; the CLI's command
// calls Supervise.
func DefaultSupervisor(dir, id string) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("local: find the phonellm executable: %w", err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return []string{exe, "fleet", "supervise", "--state-dir", dir, id}, nil
}

// GatewayPlan is what a deployment's gateway is started with; Options.Gateway turns it into a command line.
type GatewayPlan struct {
	Port int
	// Identity is the value the gateway must send in deploy.GatewayIdentityHeader.
	Identity string
	// APIKeyEnv names the variable holding the key clients must send (and the gateway sends to replicas).
	APIKeyEnv string
}

// DefaultGateway runs this executable's gateway command over the deployment: `gateway --deployment ID
// --state-dir DIR --listen-fd 3 --identity X [--api-key-env NAME]`.
func DefaultGateway(dir, id string, g GatewayPlan) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("local: find the phonellm executable: %w", err)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	argv := []string{exe, "gateway", "--deployment", id, "--state-dir", dir, "--listen-fd", strconv.Itoa(ListenFD), "--identity", g.Identity}
	if g.APIKeyEnv != "" {
		argv = append(argv, "--api-key-env", g.APIKeyEnv)
	}
	return argv, nil
}

// Deploy records the deployment, starts its supervisor detached, and returns once the supervisor has taken
// over (processes are then starting; see WaitReady). The model must be a local file (Spec.Model.Path) of
// Spec.Model.Size bytes. When the spec's target options ask for a gateway, Deploy binds its port first — a
// port in use is a *deploy.PortInUseError before anything starts — and hands the bound socket to the
// supervisor, which keeps it for the deployment's life.
func (f *Fleet) Deploy(ctx context.Context, spec deploy.Spec) (deploy.Deployment, error) {
	if err := supported(); err != nil {
		return deploy.Deployment{}, err
	}
	if err := spec.Validate(); err != nil {
		return deploy.Deployment{}, err
	}
	if spec.Model.Path == "" {
		return deploy.Deployment{}, errors.New("local: spec: the local target needs model.path (a GGUF on this machine)")
	}
	model, err := filepath.Abs(spec.Model.Path)
	if err != nil {
		return deploy.Deployment{}, fmt.Errorf("local: model path: %w", err)
	}
	st, err := os.Stat(model)
	if err != nil {
		return deploy.Deployment{}, fmt.Errorf("local: model: %w", err)
	}
	if st.Size() != spec.Model.Size {
		return deploy.Deployment{}, fmt.Errorf("local: model %s: %d bytes, the spec says %d", model, st.Size(), spec.Model.Size)
	}
	if err := keyPresent(spec); err != nil {
		return deploy.Deployment{}, err
	}
	to, err := decodeTargetOptions(spec)
	if err != nil {
		return deploy.Deployment{}, err
	}
	forbidKey(f.o.Store, spec)
	var ln net.Listener
	if to.Gateway != nil {
		if ln, err = listenGateway(to.Gateway.Port); err != nil {
			return deploy.Deployment{}, err
		}
		defer ln.Close() // the supervisor holds its own copy
	}

	id, err := f.newID(spec.Name)
	if err != nil {
		return deploy.Deployment{}, err
	}
	dir := runDir(f.o.Store, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return deploy.Deployment{}, fmt.Errorf("local: %w", err)
	}
	ports, err := f.ports(spec.Replicas)
	if err != nil {
		return deploy.Deployment{}, err
	}
	threads := spec.Threads
	if threads == 0 {
		threads = max(1, f.o.Cores/spec.Replicas)
	}
	d := deploy.Deployment{ID: id, Target: Target, Spec: spec, CreatedAt: time.Now().UTC(), State: deploy.StatePending}
	x := Extra{Memory: "none"}
	if spec.MemoryLimit > 0 {
		x.Memory = "rss-watchdog+rlimit-as"
		if memoryWrapper(1) == nil {
			x.Memory = "rss-watchdog+rlimit-as-after-start"
		}
	}
	for i := range spec.Replicas {
		p := Plan{Index: i, Host: "127.0.0.1", Port: ports[i], Threads: threads, Slots: max(spec.Slots, 1), Ctx: spec.Ctx,
			Model: model, APIKeyEnv: spec.APIKeyEnv}
		if len(spec.Candidates) > 0 {
			c := spec.Candidates[0]
			p.Batch, p.Flash = c.Batch, c.FlashAttn
			if spec.Threads == 0 && c.Threads > 0 {
				p.Threads = min(c.Threads, threads)
			}
		}
		argv, err := f.o.Command(spec, p)
		if err != nil {
			return deploy.Deployment{}, fmt.Errorf("local: replica %d: %w", i, err)
		}
		if len(argv) == 0 {
			return deploy.Deployment{}, fmt.Errorf("local: replica %d: empty command", i)
		}
		d.Replicas = append(d.Replicas, deploy.Replica{Index: i, URL: "http://" + net.JoinHostPort(p.Host, strconv.Itoa(p.Port)), State: deploy.StatePending})
		x.Replicas = append(x.Replicas, Process{Index: i, Port: p.Port, Threads: p.Threads, MemoryLimit: spec.MemoryLimit, Argv: argv,
			Log: filepath.Join(dir, fmt.Sprintf("replica-%d.log", i))})
	}
	if ln != nil {
		port := listenerPort(ln)
		ident, err := newIdentity()
		if err != nil {
			return deploy.Deployment{}, err
		}
		argv, err := f.o.Gateway(f.o.Store.Dir, id, GatewayPlan{Port: port, Identity: ident, APIKeyEnv: spec.APIKeyEnv})
		if err != nil {
			return deploy.Deployment{}, fmt.Errorf("local: gateway: %w", err)
		}
		if len(argv) == 0 {
			return deploy.Deployment{}, errors.New("local: gateway: empty command")
		}
		d.Gateway = &deploy.Gateway{URL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Identity: ident, State: deploy.StatePending}
		x.Gateway = &Process{Index: -1, Port: port, Argv: argv, Log: filepath.Join(dir, "gateway.log")}
	}
	if err := encodeExtra(&d, x); err != nil {
		return deploy.Deployment{}, err
	}
	if err := f.o.Store.Save(d); err != nil {
		return deploy.Deployment{}, err
	}
	if err := f.startSupervisor(ctx, d, ln); err != nil {
		d.State = deploy.StateFailed
		_ = f.o.Store.Save(d)
		return d, err
	}
	return f.o.Store.Load(id)
}

// newID derives a fresh deployment ID from the name and the time.
func (f *Fleet) newID(name string) (string, error) {
	base := deploy.NewID(name, time.Now().UTC().Format("20060102-150405"))
	for n := 1; n < 1000; n++ {
		id := base
		if n > 1 {
			id = base + "-" + strconv.Itoa(n)
		}
		_, err := f.o.Store.Load(id)
		if errors.Is(err, deploy.ErrNotFound) {
			return id, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("local: no free deployment id for %q", name)
}

// ports returns n loopback ports: BasePort+i, or ports the kernel reports free now.
func (f *Fleet) ports(n int) ([]int, error) {
	out := make([]int, 0, n)
	if f.o.BasePort > 0 {
		for i := range n {
			out = append(out, f.o.BasePort+i)
		}
		return out, nil
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("local: pick a port: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// newIdentity is a fresh gateway identity: 128 random bits, hex.
func newIdentity() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("local: gateway identity: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// startSupervisor starts the supervisor in its own session and waits until it has recorded itself. ln, when
// set, is the gateway's bound socket, handed to the supervisor at file descriptor ListenFD.
func (f *Fleet) startSupervisor(ctx context.Context, d deploy.Deployment, ln net.Listener) error {
	argv, err := f.o.Supervisor(f.o.Store.Dir, d.ID)
	if err != nil {
		return err
	}
	if len(argv) == 0 {
		return errors.New("local: empty supervisor command")
	}
	logPath := filepath.Join(runDir(f.o.Store, d.ID), "supervisor.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("local: supervisor log: %w", err)
	}
	defer logf.Close()
	// Not CommandContext: the supervisor must outlive this process.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = detachAttr()
	if ln != nil {
		lf, err := listenerFile(ln)
		if err != nil {
			return err
		}
		defer lf.Close()
		cmd.ExtraFiles = []*os.File{lf}
		cmd.Env = append(os.Environ(), ListenFDEnv+"="+strconv.Itoa(ListenFD))
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("local: start supervisor %s: %w", argv[0], err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reap it if it ends while we run
	deadline := time.NewTimer(f.o.StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return fmt.Errorf("local: supervisor exited at start (%s); its log %s says: %s", cmd.ProcessState, logPath, tail(logPath, 2048))
		case <-deadline.C:
			_ = cmd.Process.Kill()
			return fmt.Errorf("local: supervisor did not take over within %v (log %s)", f.o.StartTimeout, logPath)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return ctx.Err()
		case <-tick.C:
			cur, err := f.o.Store.Load(d.ID)
			if err != nil {
				continue
			}
			if x, err := decodeExtra(cur); err == nil && x.Supervisor.PID == cmd.Process.Pid {
				return nil
			}
		}
	}
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	fh, err := os.Open(path)
	if err != nil {
		return "(unreadable)"
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.Size() > n {
		_, _ = fh.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(fh, n))
	return string(b)
}

func (f *Fleet) load(id string) (deploy.Deployment, Extra, error) {
	d, err := f.o.Store.Load(id)
	if err != nil {
		return d, Extra{}, err
	}
	x, err := decodeExtra(d)
	return d, x, err
}

// Detail is what Status puts in each replica's (and the gateway's) Detail: the process record plus the
// process's own /health.
type Detail struct {
	PID         int             `json:"pid,omitempty"`
	Port        int             `json:"port"`
	Threads     int             `json:"threads,omitempty"`
	MemoryLimit int64           `json:"memory_limit_bytes,omitempty"`
	RSS         int64           `json:"rss_bytes,omitempty"`
	StartedAt   time.Time       `json:"started_at,omitzero"`
	Restarts    int             `json:"restarts"`
	LastExit    string          `json:"last_exit,omitempty"`
	LastExitAt  time.Time       `json:"last_exit_at,omitzero"`
	Log         string          `json:"log"`
	Health      json.RawMessage `json:"health,omitempty"`
}

// Status checks every process now: its PID and start time, its health (a replica's GET /health; the
// gateway's GET /health answered with the deployment's identity), and whether the supervisor still runs. A
// replica is ready when /health answers 200; the deployment is ready only when every replica and the gateway
// are.
func (f *Fleet) Status(ctx context.Context, id string) (deploy.Status, error) {
	d, x, err := f.load(id)
	if err != nil {
		return deploy.Status{}, err
	}
	st := deploy.Status{ID: d.ID, Target: Target, Replicas: make([]deploy.ReplicaStatus, len(d.Replicas))}
	supervised := alive(x.Supervisor)
	var wg sync.WaitGroup
	for i, r := range d.Replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.Replicas[i] = f.replicaStatus(ctx, d, r, x.Replicas[i], supervised)
		}()
	}
	if d.Gateway != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs := f.gatewayStatus(ctx, d, *x.Gateway, supervised)
			st.Gateway = &gs
		}()
	}
	wg.Wait()
	if g := st.Gateway; g != nil && g.Healthy {
		// Prompt-cache hit rates, as the gateway counted what each replica reported.
		if m, err := f.gatewayCache(ctx, d); err == nil {
			for i := range st.Replicas {
				if c, ok := m[fmt.Sprintf("replica-%d", st.Replicas[i].Index)]; ok {
					st.Replicas[i].Cache = c
				}
			}
		}
	}
	states := make([]deploy.State, 0, len(st.Replicas)+1)
	for _, r := range st.Replicas {
		states = append(states, r.State)
	}
	if st.Gateway != nil {
		states = append(states, st.Gateway.State)
	}
	st.State = deploy.Aggregate(states)
	if d.State == deploy.StateStopped {
		st.State = deploy.StateStopped
	}
	return st, nil
}

// processState is the state of a supervised process as a status check sees it, with an error for people.
func processState(d deploy.Deployment, p Process, supervised, running bool) (deploy.State, string) {
	switch {
	case d.State == deploy.StateStopped:
		return deploy.StateStopped, ""
	case !supervised:
		return deploy.StateFailed, "the supervisor is not running (resume or stop the deployment)"
	case !running:
		if p.LastExit != "" {
			return deploy.StatePending, "restarting after: " + p.LastExit
		}
		return deploy.StatePending, "restarting"
	}
	return deploy.StateStarting, ""
}

func detailOf(p Process, running bool) Detail {
	det := Detail{Port: p.Port, Threads: p.Threads, MemoryLimit: p.MemoryLimit, Restarts: p.Restarts, LastExit: p.LastExit,
		LastExitAt: p.LastExitAt, Log: p.Log}
	if running {
		det.PID, det.StartedAt = p.PID, p.StartedAt
		det.RSS, _ = rssBytes(p.PID)
	}
	return det
}

func (f *Fleet) replicaStatus(ctx context.Context, d deploy.Deployment, r deploy.Replica, p Process, supervised bool) deploy.ReplicaStatus {
	rs := deploy.ReplicaStatus{Replica: r, CheckedAt: time.Now().UTC()}
	running := alive(p.Proc)
	det := detailOf(p, running)
	rs.Ref = ""
	if running {
		rs.Ref = strconv.Itoa(p.PID)
	}
	rs.State, rs.Error = processState(d, p, supervised, running)
	if rs.State == deploy.StateStarting {
		body, err := f.health(ctx, r.URL)
		if err != nil {
			rs.Error = err.Error()
		} else {
			rs.State, rs.Healthy = deploy.StateReady, true
			det.Health = body
		}
	}
	rs.Detail, _ = json.Marshal(det)
	return rs
}

func (f *Fleet) gatewayStatus(ctx context.Context, d deploy.Deployment, p Process, supervised bool) deploy.GatewayStatus {
	gs := deploy.GatewayStatus{Gateway: *d.Gateway, CheckedAt: time.Now().UTC()}
	running := alive(p.Proc)
	det := detailOf(p, running)
	gs.State, gs.Error = processState(d, p, supervised, running)
	if gs.State == deploy.StateStarting {
		body, err := deploy.ProbeGateway(ctx, f.o.Client, *d.Gateway)
		if err != nil {
			gs.Error = err.Error()
		} else {
			gs.State, gs.Healthy = deploy.StateReady, true
			det.Health = body
		}
	}
	gs.Detail, _ = json.Marshal(det)
	return gs
}

// gatewayCache reads the per-replica prompt-cache counters from the deployment's gateway's /metrics (with the
// deployment's API key when its variable is set here), by replica name.
func (f *Fleet) gatewayCache(ctx context.Context, d deploy.Deployment) (map[string]*deploy.CacheStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.Gateway.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if d.Spec.APIKeyEnv != "" {
		if key := os.Getenv(d.Spec.APIKeyEnv); key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
	}
	resp, err := f.o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(deploy.GatewayIdentityHeader) != d.Gateway.Identity {
		return nil, fmt.Errorf("gateway metrics: status %d", resp.StatusCode)
	}
	out := map[string]*deploy.CacheStats{}
	for name, c := range gateway.ParseReplicaMetrics(io.LimitReader(resp.Body, 4<<20)) {
		out[name] = &deploy.CacheStats{Requests: c.Hits + c.Misses, Hits: c.Hits, PromptTokens: c.PromptTokens,
			CachedTokens: c.CachedTokens, HitRate: c.HitRate(), Source: "gateway"}
	}
	return out, nil
}

// health GETs /health and returns its JSON body (bounded) when the answer is 200.
func (f *Fleet) health(ctx context.Context, base string) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("health: status %d", resp.StatusCode)
	}
	if !json.Valid(b) {
		b, _ = json.Marshal(string(b))
	}
	return b, nil
}

// Endpoints lists the replica URLs of a deployment that is not stopped.
func (f *Fleet) Endpoints(ctx context.Context, id string) ([]deploy.Endpoint, error) {
	d, err := f.o.Store.Load(id)
	if err != nil {
		return nil, err
	}
	if d.State == deploy.StateStopped {
		return nil, fmt.Errorf("local: deployment %s is stopped", id)
	}
	return d.Endpoints(), nil
}

// crashLoop is how many restarts of one process while WaitReady waits mean it will not come up.
const crashLoop = 3

// WaitReady polls Status until at least n replicas (n <= 0: all of them) and the gateway, when there is one,
// are ready. It fails when ctx ends, when the deployment is stopped or its supervisor gone, and when a process
// keeps exiting (crashLoop restarts while waiting), naming the process, its last exit and its log.
func (f *Fleet) WaitReady(ctx context.Context, id string, n int) (deploy.Status, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	base := map[string]int{}
	first := true
	for {
		st, err := f.Status(ctx, id)
		if err != nil {
			return st, err
		}
		want := n
		if want <= 0 || want > len(st.Replicas) {
			want = len(st.Replicas)
		}
		ready := 0
		for _, r := range st.Replicas {
			if r.Healthy {
				ready++
			}
		}
		gatewayUp := st.Gateway == nil || (st.Gateway.Healthy && gatewayRoutes(st.Gateway, want))
		switch {
		case ready >= want && gatewayUp:
			return st, nil
		case st.State == deploy.StateStopped || st.State == deploy.StateFailed:
			return st, fmt.Errorf("local: deployment %s is %s (%d of %d replicas ready%s)", id, st.State, ready, want, gatewayNote(st))
		}
		for _, m := range members(st) {
			var det Detail
			if json.Unmarshal(m.detail, &det) != nil {
				continue
			}
			if first {
				base[m.name] = det.Restarts
				continue
			}
			if !m.healthy && det.Restarts-base[m.name] >= crashLoop {
				return st, fmt.Errorf("local: deployment %s: %s exited %d times while starting; last: %s (log %s)", id, m.name, det.Restarts-base[m.name], det.LastExit, det.Log)
			}
		}
		first = false
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("local: deployment %s: %d of %d replicas ready%s: %w", id, ready, want, gatewayNote(st), ctx.Err())
		case <-t.C:
		}
	}
}

// gatewayRoutes reports whether the gateway's last /health (in its status detail) counts at least want live
// replicas, so that ship's first request is routed at once rather than queued behind the gateway's own first
// health probes (runtime/gateway's GET /health: {"replicas": N, "replicas_live": M, ...}).
func gatewayRoutes(g *deploy.GatewayStatus, want int) bool {
	var det Detail
	if json.Unmarshal(g.Detail, &det) != nil {
		return false
	}
	var h struct {
		Live int `json:"replicas_live"`
	}
	return json.Unmarshal(det.Health, &h) == nil && h.Live >= want
}

func gatewayNote(st deploy.Status) string {
	switch {
	case st.Gateway == nil:
		return ""
	case st.Gateway.Healthy:
		return ", gateway ready"
	case st.Gateway.Error != "":
		return ", gateway not ready: " + st.Gateway.Error
	}
	return ", gateway not ready"
}

type member struct {
	name    string
	healthy bool
	detail  json.RawMessage
}

func members(st deploy.Status) []member {
	var out []member
	for _, r := range st.Replicas {
		out = append(out, member{name: fmt.Sprintf("replica %d", r.Index), healthy: r.Healthy, detail: r.Detail})
	}
	if g := st.Gateway; g != nil {
		out = append(out, member{name: "gateway", healthy: g.Healthy, detail: g.Detail})
	}
	return out
}
