package oracle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// respPrefix marks protocol lines on the oracle's stdout (anything else is stray native output).
const respPrefix = "@@oracle "

// maxLine bounds one response line (full-vocabulary logits of every position of a long prompt are large).
const maxLine = 1 << 30

// startTimeout bounds process start-up (about 0.8 s idle; over 10 s seen on a loaded 2-core machine).
const startTimeout = 3 * time.Minute

// DefaultTimeout bounds one request.
const DefaultTimeout = 5 * time.Minute

// ContextOptions are the llama.cpp context settings sent with every evaluating request. Zero values mean
// the oracle's defaults: context 512, batch min(512, context), threads $PHONELLM_ORACLE_THREADS or 1,
// flash attention off.
type ContextOptions struct {
	ContextSize    int
	BatchSize      int
	Threads        int
	FlashAttention bool
	// KVCacheType is the K/V cache element type: "" or "F16" (llama.cpp's default), or "F32" to compare logits
	// with an f32 reference within 1e-3 (an F16 cache alone costs ~1e-2 on tiny random models).
	KVCacheType string
}

// Oracle is a running oracle process. Its methods are safe for concurrent use; requests are served one
// at a time in order.
type Oracle struct {
	// Context applies to logits, greedy, chat and bench requests.
	Context ContextOptions
	// Timeout bounds each request (DefaultTimeout when zero). A request that times out kills the process.
	Timeout time.Duration
	// StartupTime is how long the process took from exec to ready (node start + llama.cpp backend load).
	StartupTime time.Duration

	mu       sync.Mutex
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	lines    chan []byte
	nextID   int64
	stderr   *tailBuffer
	waitOnce sync.Once
	waitErr  error
	closed   bool
}

// Error is a request that the oracle answered with a failure, e.g. llama.cpp rejecting a GGUF file.
type Error struct {
	Op    string
	Model string
	Msg   string
	Log   []string // llama.cpp log lines (warnings and errors) seen while serving the request
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "oracle %s", e.Op)
	if e.Model != "" {
		fmt.Fprintf(&b, " %s", e.Model)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

// Start starts an oracle for a test and closes it when the test ends. When the oracle is not installed
// it skips the test, or fails it when PHONELLM_REQUIRE_ORACLE=1 (Unavailable).
// A failure to start an installed oracle always fails the test.
func Start(t testing.TB) *Oracle {
	t.Helper()
	requireAvailable(t)
	o, err := New()
	if err != nil {
		t.Fatalf("start llama.cpp oracle: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("close llama.cpp oracle: %v", err)
		}
	})
	return o
}

// requireAvailable calls Unavailable when the oracle is not installed.
func requireAvailable(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		Unavailable(t, fmt.Sprintf("llama.cpp oracle not available (%s to install): %v", SetupCommand, err))
	}
}

var shared struct {
	once sync.Once
	o    *Oracle
	err  error
}

// Shared is Start for tests that can share one oracle process per test binary, paying the start-up cost
// (about 0.8 s) once. The process ends when the test binary exits. Callers must not change its Context
// or Timeout; use Start for an oracle with other settings.
func Shared(t testing.TB) *Oracle {
	t.Helper()
	requireAvailable(t)
	shared.once.Do(func() { shared.o, shared.err = New() })
	if shared.err != nil {
		t.Fatalf("start llama.cpp oracle: %v", shared.err)
	}
	return shared.o
}

// New starts an oracle process and waits until it is ready.
func New() (*Oracle, error) {
	in, err := locate()
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	cmd := exec.Command(in.node, in.script)
	cmd.Env = append(os.Environ(),
		EnvDir+"="+in.modulesRoot,
		"NODE_LLAMA_CPP_SKIP_DOWNLOAD=true",
		"NODE_LLAMA_CPP_GPU=false",
	)
	o := &Oracle{cmd: cmd, stderr: &tailBuffer{max: 64 << 10}, lines: make(chan []byte, 4)}
	cmd.Stderr = o.stderr
	if o.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("oracle: start %s: %w", in.node, err)
	}
	go o.read(stdout)
	ready, err := o.receive(0, startTimeout)
	if err != nil {
		o.kill()
		return nil, err
	}
	var r struct {
		Ready bool `json:"ready"`
	}
	if err := json.Unmarshal(ready, &r); err != nil || !r.Ready {
		o.kill()
		return nil, fmt.Errorf("oracle: unexpected greeting %s", ready)
	}
	o.StartupTime = time.Since(begin)
	return o, nil
}

// read forwards protocol lines to o.lines and keeps other stdout lines with stderr's tail.
func (o *Oracle) read(stdout io.Reader) {
	defer close(o.lines)
	br := bufio.NewReaderSize(stdout, 1<<16)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > maxLine {
				o.stderr.Write([]byte("oracle: response line too long\n"))
				o.kill()
				return
			}
			continue
		}
		if len(line) > 0 {
			if rest, ok := bytes.CutPrefix(line, []byte(respPrefix)); ok {
				o.lines <- bytes.Clone(rest)
			} else {
				o.stderr.Write(line)
			}
		}
		line = line[:0]
		if err != nil {
			return
		}
	}
}

type response struct {
	ID     int64           `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
	Log    []string        `json:"log"`
}

// receive waits for the response with the given id.
func (o *Oracle) receive(id int64, timeout time.Duration) (json.RawMessage, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-o.lines:
			if !ok {
				o.waitExit()
				return nil, fmt.Errorf("oracle: process exited (%v); stderr:\n%s", o.waitErr, o.stderr.String())
			}
			var r response
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, fmt.Errorf("oracle: bad response line %.200q: %w", line, err)
			}
			if r.ID != id {
				continue // a stale answer to a request that timed out earlier cannot happen (we kill), but be safe
			}
			if !r.OK {
				return nil, &Error{Msg: r.Error, Log: r.Log}
			}
			return r.Result, nil
		case <-timer.C:
			o.kill()
			return nil, fmt.Errorf("oracle: no answer within %v; stderr:\n%s", timeout, o.stderr.String())
		}
	}
}

func (o *Oracle) kill() {
	if o.cmd.Process != nil {
		_ = o.cmd.Process.Kill()
	}
	o.waitExit()
}

func (o *Oracle) waitExit() {
	o.waitOnce.Do(func() {
		o.waitErr = o.cmd.Wait()
	})
}

// call sends one request and decodes its result into out.
func (o *Oracle) call(op string, req map[string]any, out any) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return fmt.Errorf("oracle %s: closed", op)
	}
	o.nextID++
	id := o.nextID
	req["id"] = id
	req["op"] = op
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("oracle %s: %w", op, err)
	}
	if _, err := o.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("oracle %s: write request: %w; stderr:\n%s", op, err, o.stderr.String())
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	res, err := o.receive(id, timeout)
	if err != nil {
		var oe *Error
		if errors.As(err, &oe) {
			oe.Op = op
			if m, ok := req["model"].(string); ok {
				oe.Model = m
			}
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(res, out); err != nil {
		return fmt.Errorf("oracle %s: decode result: %w", op, err)
	}
	return nil
}

// withContext adds the context options to a request.
func (o *Oracle) withContext(req map[string]any) map[string]any {
	c := o.Context
	if c.ContextSize > 0 {
		req["contextSize"] = c.ContextSize
	}
	if c.BatchSize > 0 {
		req["batchSize"] = c.BatchSize
	}
	if c.Threads > 0 {
		req["threads"] = c.Threads
	}
	if c.FlashAttention {
		req["flashAttention"] = true
	}
	if c.KVCacheType != "" {
		req["kvCacheType"] = c.KVCacheType
	}
	return req
}

// Close ends the oracle process (closing its stdin lets it dispose llama.cpp cleanly).
func (o *Oracle) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	_ = o.stdin.Close()
	exited := make(chan struct{})
	go func() {
		o.waitExit()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = o.cmd.Process.Kill()
		<-exited
	}
	if o.waitErr != nil {
		return fmt.Errorf("oracle: exit: %w; stderr:\n%s", o.waitErr, o.stderr.String())
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
