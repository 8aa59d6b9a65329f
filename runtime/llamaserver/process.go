package llamaserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Options configure Start. Binary and Model are required.
type Options struct {
	// Binary is the llama-server executable.
	Binary string
	// Model is the GGUF to serve.
	Model string
	// Threads (-t); 0 leaves llama-server's default.
	Threads int
	// Parallel slots (-np); default 1.
	Parallel int
	// ContextLength per slot; llama-server gets -c ContextLength×Parallel.
	// 0 means 4096.
	ContextLength int
	// BatchSize (-b); 0 leaves llama-server's default.
	BatchSize int
	// Alias (-a) is the model name served; default the file name.
	Alias string
	// Args are appended to the command line.
	Args []string
	// Env is added to the process environment.
	Env []string
	// StartTimeout bounds the wait for /health to answer 200; default 5 min.
	StartTimeout time.Duration
	// Log receives the process's stdout and stderr; nil discards them.
	Log *os.File
}

// Validate checks o.
func (o Options) Validate() error {
	switch {
	case o.Binary == "":
		return errors.New("llamaserver: no llama-server binary")
	case o.Model == "":
		return errors.New("llamaserver: no model")
	case o.Threads < 0, o.Parallel < 0, o.ContextLength < 0, o.BatchSize < 0:
		return fmt.Errorf("llamaserver: negative count in %+v", o)
	}
	return nil
}

// Start runs o.Binary on a free loopback port, waits until it has loaded
// the model and returns a Client for it. Close stops the process (SIGTERM,
// then SIGKILL after 10 s). If the process exits early, Start returns its
// exit status.
func Start(ctx context.Context, o Options) (*Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(o.Model); err != nil {
		return nil, fmt.Errorf("llamaserver: model: %w", err)
	}
	if o.Parallel == 0 {
		o.Parallel = 1
	}
	if o.ContextLength == 0 {
		o.ContextLength = 4096
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 5 * time.Minute
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--model", o.Model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--ctx-size", strconv.Itoa(o.ContextLength * o.Parallel), "--parallel", strconv.Itoa(o.Parallel), "--jinja"}
	if o.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(o.Threads))
	}
	if o.BatchSize > 0 {
		args = append(args, "--batch-size", strconv.Itoa(o.BatchSize))
	}
	if o.Alias != "" {
		args = append(args, "--alias", o.Alias)
	}
	args = append(args, o.Args...)
	// The process outlives ctx (Start's deadline); Close ends it.
	cmd := exec.Command(o.Binary, args...)
	cmd.Env = append(os.Environ(), o.Env...)
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("llamaserver: start %s: %w", o.Binary, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	wctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := p.waitHealthy(wctx, base); err != nil {
		_ = p.stop()
		return nil, err
	}
	c, err := Connect(wctx, base, "")
	if err != nil {
		_ = p.stop()
		return nil, err
	}
	c.stop = p.stop
	return c, nil
}

type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	once   sync.Once
}

func (p *process) waitHealthy(ctx context.Context, base string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/health", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("llamaserver: %s exited while loading: %v", p.cmd.Path, p.err)
		case <-ctx.Done():
			return fmt.Errorf("llamaserver: %s not healthy: %w", p.cmd.Path, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (p *process) stop() error {
	var err error
	p.once.Do(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			err = fmt.Errorf("llamaserver: %s ignored SIGTERM; killed", p.cmd.Path)
		}
	})
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("llamaserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
