package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/runtime/gateway"
)

// LocalFleetOptions say how StartLocalFleet runs a fleet on this machine: Replicas `phonellm serve` processes
// and a gateway in this process in front of them.
type LocalFleetOptions struct {
	// Exe is the phonellm executable the replicas run (`Exe serve MODEL ...`).
	Exe   string
	Model string
	// Replicas (default 3), Threads per replica (default 1), Parallel slots per replica (default 1), Ctx
	// tokens per slot (default 8192), KVType the cache type ("" = f16).
	Replicas, Threads, Parallel, Ctx int
	KVType                           string
	// Alias is the model name the replicas serve (default "fleet-bench").
	Alias string
	// Dir receives the replicas' logs (replica-N.log).
	Dir string
	// Affinity configures the gateway's routing.
	Affinity gateway.AffinityOptions
	// StartTimeout bounds the wait for every replica to load (default 10 min).
	StartTimeout time.Duration
}

// LocalFleet is a running local fleet. Close stops it.
type LocalFleet struct {
	// URL is the gateway's base URL.
	URL   string
	Alias string
	procs []*exec.Cmd
	spawn *spawner
	gw    *gateway.Gateway
	stop  context.CancelFunc
	done  chan struct{}
	once  sync.Once
}

// StartLocalFleet starts the replicas (each in its own process group, killed with this process on Linux),
// waits until each has loaded the model and printed its URL, and serves a gateway over them on a free loopback
// port. On failure it stops what it started and names the replica's log.
func StartLocalFleet(ctx context.Context, o LocalFleetOptions) (*LocalFleet, error) {
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Threads == 0 {
		o.Threads = 1
	}
	if o.Parallel == 0 {
		o.Parallel = 1
	}
	if o.Ctx == 0 {
		o.Ctx = 8192
	}
	if o.Alias == "" {
		o.Alias = "fleet-bench"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 10 * time.Minute
	}
	if o.Replicas < 1 || o.Replicas > 64 || o.Threads < 1 || o.Parallel < 1 || o.Ctx < 1 {
		return nil, &WorkloadError{Msg: fmt.Sprintf("local fleet: %d replicas, %d threads, %d slots, ctx %d: want 1..64 replicas and positive counts",
			o.Replicas, o.Threads, o.Parallel, o.Ctx)}
	}
	if o.Exe == "" || o.Model == "" || o.Dir == "" {
		return nil, errors.New("bench fleet: local fleet needs the executable, the model and a log folder")
	}
	f := &LocalFleet{Alias: o.Alias, done: make(chan struct{}), spawn: newSpawner()}
	var reps []gateway.Replica
	sctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	for i := range o.Replicas {
		url, err := f.startReplica(sctx, o, i)
		if err != nil {
			f.Close()
			return nil, err
		}
		reps = append(reps, gateway.Replica{URL: url, Slots: o.Parallel, Name: fmt.Sprintf("replica-%d", i)})
	}
	g, err := gateway.New(gateway.Options{RateLimit: -1, HealthInterval: time.Second, QueueSize: 4096,
		QueueTimeout: 30 * time.Minute, ResponseTimeout: 30 * time.Minute, Affinity: o.Affinity})
	if err != nil {
		f.Close()
		return nil, err
	}
	f.gw = g
	if err := g.SetReplicas(reps); err != nil {
		f.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return nil, err
	}
	f.URL = "http://" + ln.Addr().String()
	gctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	go func() {
		defer close(f.done)
		_ = g.Serve(gctx, ln)
	}()
	for {
		live := 0
		for _, r := range g.Replicas() {
			if r.Live {
				live++
			}
		}
		if live == len(reps) {
			return f, nil
		}
		select {
		case <-sctx.Done():
			f.Close()
			return nil, fmt.Errorf("bench fleet: %d of %d replicas live after %s", live, len(reps), o.StartTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (f *LocalFleet) startReplica(ctx context.Context, o LocalFleetOptions, i int) (string, error) {
	logPath := filepath.Join(o.Dir, fmt.Sprintf("replica-%d.log", i))
	logf, err := os.Create(logPath)
	if err != nil {
		return "", fmt.Errorf("bench fleet: %w", err)
	}
	defer logf.Close()
	args := []string{"serve", o.Model, "--host", "127.0.0.1", "--port", "0", "--threads", strconv.Itoa(o.Threads),
		"--parallel", strconv.Itoa(o.Parallel), "--ctx", strconv.Itoa(o.Ctx), "--alias", o.Alias}
	if o.KVType != "" {
		args = append(args, "--kv-type", o.KVType)
	}
	cmd := exec.Command(o.Exe, args...)
	// The replicas serve this process only: no API key, whatever the environment says.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PHONELLM_API_KEY=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttrs()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := f.spawn.start(cmd); err != nil {
		return "", fmt.Errorf("bench fleet: start replica %d: %w", i, err)
	}
	f.procs = append(f.procs, cmd)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "http://") {
				select {
				case urls <- line:
				default:
				}
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if ok {
			return u, nil
		}
		return "", fmt.Errorf("bench fleet: replica %d exited while loading (log %s)", i, logPath)
	case <-ctx.Done():
		return "", fmt.Errorf("bench fleet: replica %d did not load in time (log %s): %w", i, logPath, ctx.Err())
	}
}

// CPU returns the CPU seconds (user + system) the replicas have used so far.
func (f *LocalFleet) CPU() (float64, error) {
	total := 0.0
	for _, c := range f.procs {
		s, err := processCPU(c.Process.Pid)
		if err != nil {
			return 0, err
		}
		total += s
	}
	return total, nil
}

// Close stops the gateway and the replicas (SIGTERM to each process group, SIGKILL after 10 s).
func (f *LocalFleet) Close() error {
	f.once.Do(func() {
		if f.stop != nil {
			f.stop()
			<-f.done
		}
		if f.gw != nil {
			f.gw.Close()
		}
		var wg sync.WaitGroup
		for _, c := range f.procs {
			wg.Go(func() { stopGroup(c, 10*time.Second) })
		}
		wg.Wait()
		f.spawn.close()
	})
	return nil
}
