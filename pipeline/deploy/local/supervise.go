package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
)

// SuperviseOptions configure Supervise. Only Store and ID are required.
type SuperviseOptions struct {
	Store *deploy.Store
	ID    string
	// Listener is the gateway's bound socket, when the caller has it (Deploy binds it and passes it to the
	// supervisor as file descriptor 3; see [ListenFDEnv]). Without it the supervisor binds the recorded port
	// itself when it first starts the gateway (Resume).
	Listener net.Listener
	// Logger receives one line per process start, exit and state change; nil discards.
	Logger *slog.Logger
	// HealthInterval is the time between health checks of a process (default 1 s); HealthTimeout bounds one
	// (default 2 s).
	HealthInterval, HealthTimeout time.Duration
	// MemoryInterval is the time between RSS readings of a replica with a memory limit (default 250 ms).
	MemoryInterval time.Duration
	// BackoffBase is the first wait before restarting a process that exited (default 500 ms); it doubles per
	// consecutive crash up to BackoffMax (default 30 s), with ±20 % jitter, and falls back to BackoffBase once
	// a process ran for StableAfter (default 60 s).
	BackoffBase, BackoffMax, StableAfter time.Duration
	// Unresponsive is the number of consecutive failed health checks after which a process that was ready is
	// killed and restarted (default 30; negative disables).
	Unresponsive int
	// StopGrace is how long processes get to exit after SIGTERM before SIGKILL (default 10 s).
	StopGrace time.Duration
}

func (o *SuperviseOptions) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.HealthInterval, time.Second)
	def(&o.HealthTimeout, 2*time.Second)
	def(&o.MemoryInterval, 250*time.Millisecond)
	def(&o.BackoffBase, 500*time.Millisecond)
	def(&o.BackoffMax, 30*time.Second)
	def(&o.StableAfter, time.Minute)
	def(&o.StopGrace, 10*time.Second)
	if o.Unresponsive == 0 {
		o.Unresponsive = 30
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// maxLog is the size at which a process's log is rotated (to <log>.1) when the process (re)starts.
const maxLog = 8 << 20

// lockWait is how long a new supervisor waits for the deployment's lock: a supervisor that was just killed
// releases it only once the kernel has torn down all of its threads, which on a loaded machine can come after
// its children have already seen it die (their parent-death signal follows the forking thread, not the process).
const lockWait = 5 * time.Second

// takeLock takes the exclusive lock at path, retrying for up to wait while another process holds it.
func takeLock(ctx context.Context, path string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		lock, held, err := lockFile(path)
		if err != nil {
			return nil, fmt.Errorf("lock: %w", err)
		}
		if held {
			return lock, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("another supervisor runs this deployment")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Supervise runs the processes of a recorded deployment — its replicas and its gateway — until ctx ends or
// the process gets SIGTERM/SIGINT (what Stop sends), restarting any that exits or stops answering, then stops
// them all and records the deployment as stopped. It is the body of `phonellm fleet supervise`. Only one
// supervisor runs per deployment (an flock on <state>/local/<id>/supervisor.lock); processes left by a
// supervisor that died are killed first.
func Supervise(ctx context.Context, o SuperviseOptions) error {
	if err := supported(); err != nil {
		return err
	}
	if o.Store == nil {
		return errors.New("local: supervise: no state store")
	}
	o.defaults()
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	if err := os.MkdirAll(runDir(o.Store, o.ID), 0o700); err != nil {
		return fmt.Errorf("local: supervise %s: %w", o.ID, err)
	}
	lock, err := takeLock(ctx, lockPath(o.Store, o.ID), lockWait)
	if err != nil {
		return fmt.Errorf("local: supervise %s: %w", o.ID, err)
	}
	defer lock.Close()
	d, err := o.Store.Load(o.ID)
	if err != nil {
		return err
	}
	x, err := decodeExtra(d)
	if err != nil {
		return err
	}
	if d.State == deploy.StateStopped {
		o.Logger.Info("deployment is stopped; nothing to supervise", "deployment", o.ID)
		return nil
	}
	if err := keyPresent(d.Spec); err != nil {
		return err
	}
	forbidKey(o.Store, d.Spec)
	s := &supervisor{o: o, d: d, x: x,
		client: &http.Client{Timeout: o.HealthTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if o.Listener != nil {
		if x.Gateway == nil || listenerPort(o.Listener) != x.Gateway.Port {
			return fmt.Errorf("local: supervise %s: the inherited listener %s is not the recorded gateway's", o.ID, o.Listener.Addr())
		}
		s.ln = o.Listener
	}
	defer func() {
		if s.ln != nil {
			s.ln.Close()
		}
	}()
	for i := range s.members() {
		if p := s.proc(i); alive(p.Proc) {
			o.Logger.Warn("killing a process left by an earlier supervisor", "process", s.name(i), "pid", p.PID)
			_ = signalGroup(p.Proc, syscall.SIGKILL)
		}
	}
	self, err := identify(os.Getpid())
	if err != nil {
		return fmt.Errorf("local: supervise %s: %w", o.ID, err)
	}
	self.StartedAt = time.Now().UTC()
	s.x.Supervisor = self
	for i := range s.members() {
		s.setStateRaw(i, deploy.StatePending)
		s.proc(i).Proc = Proc{}
	}
	s.mu.Lock()
	err = s.saveLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	o.Logger.Info("supervising", "deployment", o.ID, "replicas", len(d.Replicas), "gateway", d.Gateway != nil, "pid", self.PID)

	var wg sync.WaitGroup
	for i := range s.members() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, i)
		}()
	}
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.members() {
		s.setStateRaw(i, deploy.StateStopped)
		s.proc(i).Proc = Proc{}
	}
	s.x.Supervisor = Proc{}
	s.d.State = deploy.StateStopped
	err = s.saveLocked()
	o.Logger.Info("stopped", "deployment", o.ID)
	return err
}

// supervisor keeps a deployment's processes running. Members 0..n-1 are the replicas, member n the gateway
// (when there is one); every member is started, watched and restarted the same way.
type supervisor struct {
	o      SuperviseOptions
	client *http.Client

	// ln is the gateway's socket, held for the deployment's life and inherited by every gateway process.
	lnMu sync.Mutex
	ln   net.Listener

	mu sync.Mutex // guards d and x
	d  deploy.Deployment
	x  Extra
}

func (s *supervisor) members() int {
	n := len(s.d.Replicas)
	if s.x.Gateway != nil {
		n++
	}
	return n
}

func (s *supervisor) isGateway(i int) bool { return i == len(s.d.Replicas) }

func (s *supervisor) name(i int) string {
	if s.isGateway(i) {
		return "gateway"
	}
	return "replica " + strconv.Itoa(i)
}

// proc is member i's process record (callers hold mu, or run before the members start).
func (s *supervisor) proc(i int) *Process {
	if s.isGateway(i) {
		return s.x.Gateway
	}
	return &s.x.Replicas[i]
}

// setStateRaw sets member i's recorded state and PID reference (callers hold mu or run alone).
func (s *supervisor) setStateRaw(i int, st deploy.State) {
	if s.isGateway(i) {
		s.d.Gateway.State = st
		return
	}
	s.d.Replicas[i].State = st
	if st == deploy.StatePending || st == deploy.StateStopped {
		s.d.Replicas[i].Ref = ""
	}
}

func (s *supervisor) state(i int) deploy.State {
	if s.isGateway(i) {
		return s.d.Gateway.State
	}
	return s.d.Replicas[i].State
}

// saveLocked writes the record; the deployment state follows its members' unless it is stopped.
func (s *supervisor) saveLocked() error {
	if s.d.State != deploy.StateStopped {
		s.d.State = deploy.Aggregate(memberStates(s.d))
	}
	if err := encodeExtra(&s.d, s.x); err != nil {
		return err
	}
	if err := s.o.Store.Save(s.d); err != nil {
		s.o.Logger.Error("saving the deployment record failed", "error", err)
		return err
	}
	return nil
}

// memberStates are the states the deployment's own state aggregates: every replica's and the gateway's.
func memberStates(d deploy.Deployment) []deploy.State {
	states := make([]deploy.State, 0, len(d.Replicas)+1)
	for _, r := range d.Replicas {
		states = append(states, r.State)
	}
	if d.Gateway != nil {
		states = append(states, d.Gateway.State)
	}
	return states
}

func (s *supervisor) setState(i int, st deploy.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state(i) == st {
		return
	}
	s.setStateRaw(i, st)
	s.o.Logger.Info("state", "process", s.name(i), "state", st)
	_ = s.saveLocked()
}

// run keeps member i running until ctx ends.
func (s *supervisor) run(ctx context.Context, i int) {
	// PR_SET_PDEATHSIG fires when the thread that forked the child exits, not the process: keep this
	// goroutine on one thread for the child's lifetime so the Go scheduler cannot retire that thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	backoff := s.o.BackoffBase
	for ctx.Err() == nil {
		started := time.Now()
		why := s.once(ctx, i)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) >= s.o.StableAfter {
			backoff = s.o.BackoffBase
		}
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		s.o.Logger.Warn("process exited", "process", s.name(i), "reason", why, "restart_in", wait.Round(time.Millisecond))
		s.mu.Lock()
		p := s.proc(i)
		p.Proc, p.LastExit, p.LastExitAt = Proc{}, why, time.Now().UTC()
		p.Restarts++
		s.setStateRaw(i, deploy.StatePending)
		_ = s.saveLocked()
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, s.o.BackoffMax)
	}
}

// once starts member i, watches it (health, memory) and returns why it ended.
func (s *supervisor) once(ctx context.Context, i int) string {
	s.mu.Lock()
	p := *s.proc(i)
	gw := s.isGateway(i)
	var url string
	var ident deploy.Gateway
	if gw {
		ident = *s.d.Gateway
	} else {
		url = s.d.Replicas[i].URL
	}
	s.mu.Unlock()

	argv := p.Argv
	var asLimit uint64
	wrapped := false
	if p.MemoryLimit > 0 {
		asLimit = uint64(p.MemoryLimit + AddressSpaceSlack)
		if w := memoryWrapper(asLimit); w != nil {
			argv, wrapped = append(w, argv...), true
		}
	}
	var files []*os.File
	if gw {
		lf, err := s.gatewaySocket(p.Port)
		if err != nil {
			return "start: " + err.Error()
		}
		defer lf.Close()
		files = append(files, lf) // file descriptor 3 in the child (ListenFD)
	}
	logf, err := openLog(p.Log)
	if err != nil {
		return "start: " + err.Error()
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = files
	cmd.Env = childEnv(i, gw)
	cmd.SysProcAttr = replicaAttr()
	if err := cmd.Start(); err != nil {
		return "start: " + err.Error()
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	proc, err := identify(cmd.Process.Pid)
	if err != nil {
		proc = Proc{PID: cmd.Process.Pid}
	}
	proc.StartedAt = time.Now().UTC()
	if asLimit > 0 && !wrapped {
		if err := limitAfterStart(proc.PID, asLimit); err != nil {
			s.o.Logger.Warn("could not limit the replica's address space", "process", s.name(i), "error", err)
		}
	}
	s.mu.Lock()
	s.proc(i).Proc = proc
	s.setStateRaw(i, deploy.StateStarting)
	if !gw {
		s.d.Replicas[i].Ref = strconv.Itoa(proc.PID)
	}
	_ = s.saveLocked()
	s.mu.Unlock()
	s.o.Logger.Info("process started", "process", s.name(i), "pid", proc.PID, "port", p.Port)

	healthy := func() bool {
		if gw {
			_, err := deploy.ProbeGateway(ctx, s.client, ident)
			return err == nil
		}
		return s.check(ctx, url)
	}
	health := time.NewTicker(s.o.HealthInterval)
	defer health.Stop()
	var memory <-chan time.Time
	if p.MemoryLimit > 0 {
		mt := time.NewTicker(s.o.MemoryInterval)
		defer mt.Stop()
		memory = mt.C
	}
	reason := ""
	ready, fails := false, 0
	for {
		select {
		case err := <-exited:
			if reason != "" {
				return reason
			}
			if err == nil {
				return "exited with status 0"
			}
			return err.Error()
		case <-ctx.Done():
			s.terminate(proc, exited)
			return "stopped"
		case <-memory:
			rss, err := rssBytes(proc.PID)
			if err == nil && rss > p.MemoryLimit && reason == "" {
				// What Android's low-memory killer does to an app over its budget.
				reason = fmt.Sprintf("killed: resident memory %d MiB over the %d MiB limit", rss>>20, p.MemoryLimit>>20)
				_ = signalGroup(proc, syscall.SIGKILL)
			}
		case <-health.C:
			if reason != "" {
				continue
			}
			if healthy() {
				fails = 0
				if !ready {
					ready = true
					s.setState(i, deploy.StateReady)
				}
				continue
			}
			if !ready {
				continue
			}
			fails++
			s.setState(i, deploy.StateStarting)
			if s.o.Unresponsive > 0 && fails >= s.o.Unresponsive {
				reason = fmt.Sprintf("killed: %d health checks failed in a row", fails)
				_ = signalGroup(proc, syscall.SIGKILL)
			}
		}
	}
}

// gatewaySocket returns a duplicate of the gateway's listening socket for a child, binding the recorded port
// the first time when no socket was inherited (a resumed deployment).
func (s *supervisor) gatewaySocket(port int) (*os.File, error) {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.ln == nil {
		ln, err := listenGateway(port)
		if err != nil {
			return nil, err
		}
		s.ln = ln
	}
	return listenerFile(s.ln)
}

// childEnv is a child's environment: this process's, without the listener hand-over variable, plus the
// replica index for replicas.
func childEnv(i int, gateway bool) []string {
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, ListenFDEnv+"=") {
			env = append(env, kv)
		}
	}
	if !gateway {
		env = append(env, "PHONELLM_REPLICA_INDEX="+strconv.Itoa(i))
	}
	return env
}

// terminate stops a process: SIGTERM to its group, SIGKILL after StopGrace.
func (s *supervisor) terminate(p Proc, exited <-chan error) {
	_ = signalGroup(p, syscall.SIGTERM)
	t := time.NewTimer(s.o.StopGrace)
	defer t.Stop()
	select {
	case <-exited:
		return
	case <-t.C:
	}
	_ = signalGroup(p, syscall.SIGKILL)
	<-exited
}

func (s *supervisor) check(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// openLog opens a process's log for appending, first rotating it to <path>.1 when it exceeds maxLog.
func openLog(path string) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && st.Size() > maxLog {
		if err := os.Rename(path, path+".1"); err != nil {
			return nil, fmt.Errorf("rotate log: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	return f, nil
}
