package calibrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/imatrix"
)

// Overhead is the cost of collecting: the same tokens evaluated in the same chunks with the engine alone and
// with the statistics collected, alternating, each pair repeated.
type Overhead struct {
	Tokens  int `json:"tokens"`
	Chunk   int `json:"chunk_size"`
	Repeats int `json:"repeats"`
	// Per repeat, in run order: wall seconds and process CPU seconds of the plain and the collecting passes.
	PlainSeconds   []float64 `json:"plain_seconds"`
	CollectSeconds []float64 `json:"collect_seconds"`
	PlainCPU       []float64 `json:"plain_cpu_seconds"`
	CollectCPU     []float64 `json:"collect_cpu_seconds"`
	// Ratio and CPURatio are the medians' ratios, collecting over plain.
	Ratio    float64 `json:"ratio"`
	CPURatio float64 `json:"cpu_ratio"`
}

// MeasureOverhead evaluates toks in chunks of chunk tokens on m, repeats times alternately without a hook
// (want nil: the engine's plain evaluation) and while collecting into a fresh Collector, timing each pass in
// wall and process CPU time. It is the benchmark of the "within 1.3× of plain evaluation" target.
func MeasureOverhead(ctx context.Context, m Model, toks []int32, chunk, repeats int, rep pipeline.Reporter) (Overhead, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if chunk <= 0 || repeats <= 0 || len(toks) < chunk {
		return Overhead{}, fmt.Errorf("imatrix: overhead: %d tokens, chunk %d, %d repeats", len(toks), chunk, repeats)
	}
	n := len(toks) / chunk
	o := Overhead{Tokens: n * chunk, Chunk: chunk, Repeats: repeats}
	pass := func(collect bool) (float64, float64, error) {
		var want func(string, bool) bool
		var fn func(imatrix.Matmul) error
		if collect {
			c := imatrix.NewCollector()
			want, fn = c.Wants, c.Observe
		}
		cpu0, start := cpuSeconds(), time.Now()
		for i := range n {
			if err := m.Observe(ctx, toks[i*chunk:(i+1)*chunk], want, fn); err != nil {
				return 0, 0, err
			}
			rep.Add(int64(chunk))
		}
		return time.Since(start).Seconds(), cpuSeconds() - cpu0, nil
	}
	pipeline.BeginItems(rep, "imatrix overhead", int64(2*repeats*n*chunk), "tokens")
	for range repeats {
		for _, collect := range []bool{false, true} {
			wall, cpu, err := pass(collect)
			if err != nil {
				rep.End("imatrix overhead", err)
				return o, err
			}
			if collect {
				o.CollectSeconds, o.CollectCPU = append(o.CollectSeconds, wall), append(o.CollectCPU, cpu)
			} else {
				o.PlainSeconds, o.PlainCPU = append(o.PlainSeconds, wall), append(o.PlainCPU, cpu)
			}
		}
	}
	rep.End("imatrix overhead", nil)
	o.Ratio = median(o.CollectSeconds) / median(o.PlainSeconds)
	if p := median(o.PlainCPU); p > 0 {
		o.CPURatio = median(o.CollectCPU) / p
	}
	return o, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuSeconds is the process's user + system CPU time, all threads (the engine's C threads included), from
// /proc/self/stat; 0 where there is none.
func cpuSeconds() float64 {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(raw[i+1:])
	if len(f) < 13 {
		return 0
	}
	// utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name.
	ut, err1 := strconv.ParseFloat(string(f[11]), 64)
	st, err2 := strconv.ParseFloat(string(f[12]), 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0
	}
	return (ut + st) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux architecture Go supports.
const clockTicks = 100
