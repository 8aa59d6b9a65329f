package hostile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The corpus test runs mutants through the phonellm binary in child processes, so an abort (SIGABRT from a
// GGML_ASSERT, SIGSEGV) is observed as such instead of killing the test. Per command it requires: no crash
// signal, no panic or ggml assertion on stderr, no hang (hangGuard), peak RSS below maxRSS, and the exit
// code the mutant's label asks for (README: 3 for bad input, 0 for a model that is still valid); serve must
// answer the request a loaded model gets, and still answer /health after it.
//
//	PHONELLM_HOSTILE=all   run the whole corpus (default: a spread sample of sampleSize mutants)
const (
	sampleSize = 150
	hangGuard  = 30 * time.Second // a command that takes longer counts as hung (tiny models load in ms)
	maxRSS     = 2 << 30
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// phonellm builds the CLI once per test binary (with the CGO flags of the environment: source scripts/env.sh
// first, or the engine is compiled anew).
func phonellm(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "hostile-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "phonellm")
		cmd := exec.Command(goTool, "build", "-o", binPath, "github.com/phonellm/phonellm/cmd/phonellm")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// result is one child process's end.
type result struct {
	code     int // exit code; -1 when killed by a signal
	signal   string
	maxRSS   int64
	stdout   string
	stderr   string
	hung     bool
	duration time.Duration
}

// tally aggregates the corpus run for the summary line.
type tally struct {
	mu                                    sync.Mutex
	mutants, runs, crashes, panics, hangs int
	wrongCode, requests                   int
	maxRSS                                int64
	maxRSSWhat                            string
	byOutcome                             map[string]int
	slowest                               time.Duration
	slowestWhat                           string
}

func (t *tally) add(what string, r result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs++
	if r.maxRSS > t.maxRSS {
		t.maxRSS, t.maxRSSWhat = r.maxRSS, what
	}
	if r.duration > t.slowest {
		t.slowest, t.slowestWhat = r.duration, what
	}
}

func childEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PHONELLM_") || strings.HasPrefix(kv, "HF_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PHONELLM_HOME="+home, "HF_HOME="+filepath.Join(home, "hf"), "NO_COLOR=1", "PHONELLM_THREADS=1")
}

// run runs a command to its end under the hang guard.
func run(bin, dir string, env []string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), duration: time.Since(start)}
	r.hung = ctx.Err() != nil
	finish(&r, cmd.ProcessState, err)
	return r
}

func finish(r *result, ps *os.ProcessState, err error) {
	if ps == nil {
		r.code = -1
		r.signal = fmt.Sprint(err)
		return
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = int64(ru.Maxrss) * 1024 // kilobytes on Linux
	}
	r.code = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.signal = ws.Signal().String()
	}
}

// crashMarkers on stderr mean a crash reached the user even if the exit code looks ordinary.
var crashMarkers = []string{"panic:", "fatal error:", "GGML_ASSERT", "goroutine 1 [", "SIGSEGV", "SIGABRT", "runtime error:"}

// judge checks one command's result against its expected outcome.
func judge(t *testing.T, tl *tally, what string, want Outcome, r result) bool {
	t.Helper()
	tl.add(what, r)
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf(what+": "+format, args...)
		ok = false
	}
	switch {
	case r.hung:
		tl.mu.Lock()
		tl.hangs++
		tl.mu.Unlock()
		fail("still running after %s (killed)", hangGuard)
		return false
	case r.signal != "" && r.code < 0:
		tl.mu.Lock()
		tl.crashes++
		tl.mu.Unlock()
		fail("killed by %s\n%s", r.signal, tail(r.stderr))
		return false
	}
	for _, m := range crashMarkers {
		if strings.Contains(r.stderr, m) {
			tl.mu.Lock()
			tl.panics++
			tl.mu.Unlock()
			fail("stderr shows %q:\n%s", m, tail(r.stderr))
			return false
		}
	}
	if r.maxRSS > maxRSS {
		fail("peak RSS %d MB", r.maxRSS>>20)
	}
	if !want.Allows(r.code) {
		tl.mu.Lock()
		tl.wrongCode++
		tl.mu.Unlock()
		fail("exit %d, want %v\n%s", r.code, want, tail(r.stderr))
	}
	if r.code == 3 {
		// One line naming the problem (a hint may follow), not a trace.
		n := 0
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.HasPrefix(l, "error:") {
				n++
			}
		}
		if n != 1 {
			fail("exit 3 with %d error lines:\n%s", n, tail(r.stderr))
		}
	}
	return ok
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 12 {
		lines = append([]string{"…"}, lines[len(lines)-12:]...)
	}
	return "\t" + strings.Join(lines, "\n\t")
}

// TestCorpus is the hostile-file acceptance test (issue 14).
func TestCorpus(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peak RSS and the FIFO mutants are checked on Linux")
	}
	all := corpus(t)
	mutants := Sample(all, sampleSize)
	if os.Getenv("PHONELLM_HOSTILE") == "all" {
		mutants = all
	}
	bin := phonellm(t)
	tl := &tally{byOutcome: map[string]int{}}
	t.Cleanup(func() {
		t.Logf("corpus: %d mutants, %d runs: %d crashes, %d panics, %d hangs, %d wrong exit codes; %d requests; peak RSS %d MB (%s); slowest %s (%s)",
			tl.mutants, tl.runs, tl.crashes, tl.panics, tl.hangs, tl.wrongCode, tl.requests,
			tl.maxRSS>>20, tl.maxRSSWhat, tl.slowest.Round(time.Millisecond), tl.slowestWhat)
		var keys []string
		for k := range tl.byOutcome {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Logf("  %s: %d", k, tl.byOutcome[k])
		}
	})
	t.Run("mutants", func(t *testing.T) {
		for _, m := range mutants {
			t.Run(m.Name, func(t *testing.T) {
				t.Parallel()
				tl.mu.Lock()
				tl.mutants++
				tl.byOutcome[fmt.Sprintf("%s inspect=%v", kindName(m), m.Expect.Inspect)]++
				tl.mu.Unlock()
				dir := t.TempDir()
				home := filepath.Join(dir, "home")
				env := childEnv(home)
				in := filepath.Join(dir, FileName(m))
				if err := m.Write(in); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(dir, "out.gguf")
				if m.Checkpoint() {
					judge(t, tl, "inspect", m.Expect.Inspect, run(bin, dir, env, "inspect", in, "--json"))
					judge(t, tl, "convert", m.Expect.Convert, run(bin, dir, env, "convert", "--model", in, "-o", out, "--outtype", "f16"))
					os.Remove(out)
					judge(t, tl, "quantize", m.Expect.Quantize, run(bin, dir, env, "quantize", "q8_0", "--model", in, "-o", out, "--threads", "1"))
					return
				}
				judge(t, tl, "inspect", m.Expect.Inspect, run(bin, dir, env, "inspect", in, "--json"))
				judge(t, tl, "fit", m.Expect.Fit, run(bin, dir, env, "fit", in, "--json"))
				judge(t, tl, "quantize", m.Expect.Quantize, run(bin, dir, env, "quantize", "q8_0", "--in", in, "-o", out, "--allow-requantize", "--threads", "1"))
				os.Remove(out)
				serve(t, tl, bin, dir, env, in, m.Expect)
			})
		}
	})
}

func kindName(m Mutant) string {
	if m.Checkpoint() {
		return "checkpoint"
	}
	return "gguf"
}

// serve starts `phonellm serve`, waits until it listens with the model loaded (or exits), sends one chat
// request, checks /health, and stops it with SIGTERM.
func serve(t *testing.T, tl *tally, bin, dir string, env []string, model string, e Expect) {
	t.Helper()
	cmd := exec.Command(bin, "serve", model, "--port", "0", "--threads", "1", "--ctx", "256")
	cmd.Dir, cmd.Env = dir, env
	var errb lockedBuffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "http://") {
				urlc <- l
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() { waitErr = cmd.Wait(); close(exited) }()
	end := func(hung bool) result {
		r := result{stderr: errb.String(), hung: hung, duration: time.Since(start)}
		finish(&r, cmd.ProcessState, waitErr)
		return r
	}
	stop := func() result {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return end(false)
		case <-time.After(hangGuard):
			cmd.Process.Kill()
			<-exited
			return end(true)
		}
	}

	var url string
	select {
	case url = <-urlc:
	case <-exited:
		// It stopped without listening ready: a refusal at load (or a crash, which judge reports).
		judge(t, tl, "serve", e.Serve, end(false))
		return
	case <-time.After(hangGuard):
		cmd.Process.Kill()
		<-exited
		judge(t, tl, "serve load", e.Serve, end(true))
		return
	}
	if e.Serve == Refuse {
		judge(t, tl, "serve (stopped with SIGTERM)", Stopped, stop())
		t.Errorf("serve: loaded a model it must refuse")
		return
	}
	if e.Reply != NoReply {
		tl.mu.Lock()
		tl.requests++
		tl.mu.Unlock()
		client := &http.Client{Timeout: hangGuard}
		body := `{"messages":[{"role":"user","content":"hello there"}],"max_tokens":4}`
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		switch {
		case err != nil:
			t.Errorf("serve: request: %v\n%s", err, tail(errb.String()))
		default:
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			switch {
			case e.Reply == Answer && resp.StatusCode != http.StatusOK:
				t.Errorf("serve: request answered %s: %s", resp.Status, b)
			case e.Reply == AnswerOrError && resp.StatusCode != http.StatusOK && resp.StatusCode < 400:
				t.Errorf("serve: request answered %s: %s", resp.Status, b)
			}
		}
		hr, err := client.Get(url + "/health")
		if err != nil {
			t.Errorf("serve: /health after the request: %v\n%s", err, tail(errb.String()))
		} else {
			hr.Body.Close()
			if hr.StatusCode != http.StatusOK {
				t.Errorf("serve: /health after the request: %s", hr.Status)
			}
		}
	}
	judge(t, tl, "serve (stopped with SIGTERM)", Stopped, stop())
}

// lockedBuffer is a bytes.Buffer safe for the writer goroutine of exec and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
