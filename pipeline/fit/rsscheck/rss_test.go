package rsscheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine"
)

// childEnv makes the test binary act as the server: PHONELLM_FIT_RSS_CHILD=path:ctx:parallel:ubatch.
const childEnv = "PHONELLM_FIT_RSS_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(child(spec))
	}
	os.Exit(m.Run())
}

// measurement is what the child reports.
type measurement struct {
	RSS, HWM     int64 // bytes, after the request
	Base, Loaded int64 // RSS before loading and right after loading
	GoHeap       int64 // Go heap held from the OS after the request (HeapSys − HeapReleased)
	GoHeapLoaded int64 // the same right after loading
	PromptTokens int
	Seconds      float64
	Err          string
}

// child loads the model with the goengine, runs one request per slot that fills its context, and prints its
// resident memory as JSON on stdout while still holding the model.
func child(spec string) int {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		out.Encode(measurement{Err: err.Error()})
		return 1
	}
	parts := strings.Split(spec, ":")
	if len(parts) != 4 {
		return fail(fmt.Errorf("bad %s %q", childEnv, spec))
	}
	n := make([]int, 3)
	for i := range n {
		v, err := strconv.Atoi(parts[i+1])
		if err != nil {
			return fail(err)
		}
		n[i] = v
	}
	ctx := context.Background()
	start := time.Now()
	base, _, err := status()
	if err != nil {
		return fail(err)
	}
	e, err := goengine.Load(ctx, goengine.Options{Path: parts[0], Threads: 2, ContextLength: n[0], Parallel: n[1], BatchSize: n[2]})
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	loaded, _, err := status()
	if err != nil {
		return fail(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapLoaded := int64(ms.HeapSys - ms.HeapReleased)
	// One full-context request per slot, at the same time, so every slot's cache and the widest batch are
	// touched (the estimate is for all slots in use). Prompts differ from the first token: no prefix sharing.
	var wg sync.WaitGroup
	resps := make([]engine.Response, n[1])
	errs := make([]error, n[1])
	for s := range n[1] {
		prompt := make([]int32, n[0]-2)
		for i := range prompt {
			prompt[i] = int32(33 + (i+7*s)%90) // printable byte tokens
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[s], errs[s] = e.Generate(ctx, engine.Request{Tokens: prompt, MaxTokens: 1, IgnoreEOG: true,
				Sampling: engine.SamplingParams{Temperature: 0}}, func(engine.Token) error { return nil })
		}()
	}
	wg.Wait()
	tokens := 0
	for s := range resps {
		if errs[s] != nil {
			return fail(errs[s])
		}
		tokens += resps[s].Timings.PromptTokens
	}
	rss, hwm, err := status()
	if err != nil {
		return fail(err)
	}
	runtime.ReadMemStats(&ms)
	out.Encode(measurement{RSS: rss, HWM: hwm, Base: base, Loaded: loaded,
		GoHeap: int64(ms.HeapSys - ms.HeapReleased), GoHeapLoaded: heapLoaded, PromptTokens: tokens, Seconds: time.Since(start).Seconds()})
	return 0
}

// status reads VmRSS and VmHWM of this process.
func status() (rss, hwm int64, err error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/self/status")
	}
	return rss, hwm, nil
}

func serve(t *testing.T, path string, ctxLen, parallel, ubatch int) measurement {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%d:%d", childEnv, path, ctxLen, parallel, ubatch))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	var m measurement
	if jerr := json.Unmarshal(outb, &m); jerr != nil {
		t.Fatalf("child: %v; stdout %q; stderr %s", err, outb, stderr.String())
	}
	if m.Err != "" {
		t.Fatalf("child: %s; stderr %s", m.Err, stderr.String())
	}
	return m
}

func check(t *testing.T, spec modelSpec, ctxLen, parallel, ubatch int) {
	path := writeModel(t, t.TempDir(), spec, []byte(spec.config))
	f, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fit.Estimate(f, fit.Options{Engine: fit.GoEngine, Ctx: ctxLen, Parallel: parallel, UBatch: ubatch})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	m := serve(t, path, ctxLen, parallel, ubatch)
	dev := float64(b.Total-m.RSS) / float64(m.RSS)
	t.Logf("%s ctx %d parallel %d ubatch %d: measured RSS %.1f MiB (before load %.1f, after load %.1f, peak %.1f MiB, %d prompt tokens, %.1f s); "+
		"Go heap %.1f MiB; predicted %.1f MiB (weights %.1f, kv %.1f, recurrent %.1f, checkpoints %.1f, compute %.1f, output %.1f, overhead %.1f): %+.1f %%",
		spec.name, ctxLen, parallel, ubatch, mib(m.RSS), mib(m.Base), mib(m.Loaded), mib(m.HWM), m.PromptTokens, m.Seconds, mib(m.GoHeap), mib(b.Total),
		mib(b.Weights), mib(b.KVCache), mib(b.Recurrent), mib(b.Checkpoints), mib(b.Compute), mib(b.Output),
		mib(b.Overhead), 100*dev)
	if math.Abs(dev) > 0.10 {
		t.Errorf("%s: prediction %.1f MiB is %+.1f %% off the measured RSS %.1f MiB (allowed ±10 %%)",
			spec.name, mib(b.Total), 100*dev, mib(m.RSS))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func TestRSSTinyQwen3(t *testing.T) {
	check(t, modelSpec{name: "tiny-qwen3", config: qwen3Tiny}, 1024, 1, 256)
}

func TestRSSQwen3Small(t *testing.T) {
	if testing.Short() {
		t.Skip("large model")
	}
	check(t, modelSpec{name: "qwen3-0.6b-shape", config: qwen3Small}, 1024, 2, 512)
}

func TestRSSQwen35Small(t *testing.T) {
	if testing.Short() {
		t.Skip("large model")
	}
	cfg, err := os.ReadFile("../known/qwen3.5-0.8b.json")
	if err != nil {
		t.Fatal(err)
	}
	check(t, modelSpec{name: "qwen3.5-0.8b-shape", config: string(cfg)}, 1024, 2, 512)
}
