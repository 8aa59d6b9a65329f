package imatrix

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
)

// Matmul is one matrix product W·x of a model weight W with the activations x of a forward pass, as an engine
// observes it (runtime/goengine's Observe gives the same fields).
type Matmul struct {
	// Weight is W's tensor name in the model GGUF.
	Weight string
	// Indirect is true for a MUL_MAT_ID (mixture of experts): each input row multiplies the expert matrix the
	// router chose for it.
	Indirect bool
	// Matrices is the number of matrices W holds: its ne[2]·ne[3] (the experts of an expert stack).
	Matrices int
	// Cols is W's row length, the length of every input row.
	Cols int
	// Tokens is the input's ne[1]: the token rows of a MUL_MAT input (llama-imatrix skips products with fewer
	// than 16); for a MUL_MAT_ID, the expert slots.
	Tokens int
	// F32 is true when the input is F32 (llama-imatrix only reads F32 MUL_MAT inputs).
	F32 bool
	// Rows yields every input row with the index of the matrix it multiplies. The slices are only valid during
	// the iteration.
	Rows iter.Seq2[int, []float32]
}

// minTokens is the smallest MUL_MAT input llama-imatrix collects ("why are small batches ignored (<16
// tokens)?", IMatrixCollector::collect_imatrix).
const minTokens = 16

// Collector accumulates the statistics of the products it is shown, as llama-imatrix's IMatrixCollector does.
// It is not safe for concurrent use: an engine reports the products of one forward pass in order.
type Collector struct {
	// ProcessOutput collects output.weight as well (llama-imatrix --process-output); by default only weights
	// whose names start with "blk." are collected from MUL_MAT products. Expert products (MUL_MAT_ID) are
	// always collected.
	ProcessOutput bool

	stats map[string]*stat
}

// stat is one weight's running sums (float64) and token counts.
type stat struct {
	cols   int
	sums   []float64
	counts []int64
}

// NewCollector returns an empty collector.
func NewCollector() *Collector { return &Collector{stats: map[string]*stat{}} }

// Wants reports whether products of a weight can be collected, so that an engine can leave the others alone:
// expert stacks (experts: the weight has more than one matrix; llama-imatrix collects every MUL_MAT_ID),
// weights whose names start with "blk.", and output.weight when ProcessOutput is set.
func (c *Collector) Wants(weight string, experts bool) bool {
	return experts || strings.HasPrefix(weight, "blk.") || c.ProcessOutput && weight == "output.weight"
}

// ActivationError reports a NaN or infinity in the input of a product: the model (or the engine) produced a
// value llama-imatrix would also stop on.
type ActivationError struct {
	Weight string
	Value  float64
}

func (e *ActivationError) Error() string {
	return fmt.Sprintf("imatrix: the input of %s sums to %v: the model produces non-finite activations", e.Weight, e.Value)
}

// Observe adds one product's inputs to the statistics.
func (c *Collector) Observe(m Matmul) error {
	if c.stats == nil {
		c.stats = map[string]*stat{}
	}
	if m.Cols <= 0 || m.Matrices <= 0 {
		return fmt.Errorf("imatrix: product with %s reports %d columns and %d matrices", m.Weight, m.Cols, m.Matrices)
	}
	if !m.Indirect {
		if m.Tokens < minTokens || !m.F32 {
			return nil
		}
		if !strings.HasPrefix(m.Weight, "blk.") && !(c.ProcessOutput && m.Weight == "output.weight") {
			return nil
		}
	} else if !m.F32 {
		return fmt.Errorf("imatrix: the expert product with %s has a non-F32 input", m.Weight)
	}
	st := c.stats[m.Weight]
	if st == nil {
		st = &stat{cols: m.Cols}
		c.stats[m.Weight] = st
	}
	if m.Indirect {
		if len(st.counts) == 1 && m.Matrices > 1 { // one count read from an older file: broadcast
			st.counts = slices.Repeat(st.counts, m.Matrices)
		}
		if st.sums == nil {
			st.sums = make([]float64, m.Cols*m.Matrices)
			st.counts = make([]int64, m.Matrices)
		}
		if err := st.consistent(m, len(st.counts) == m.Matrices); err != nil {
			return err
		}
		for ex, x := range m.Rows {
			if ex < 0 || ex >= m.Matrices || len(x) != m.Cols {
				return fmt.Errorf("imatrix: expert product with %s gave row of %d values for matrix %d (want %d values, %d matrices)",
					m.Weight, len(x), ex, m.Cols, m.Matrices)
			}
			st.counts[ex]++
			accumulate(st.sums[ex*m.Cols:(ex+1)*m.Cols], x)
		}
		return st.finite(m.Weight)
	}
	// Dense: one count for the tensor (several equal counts from an older file collapse to one).
	if len(st.counts) > 1 && allEqual(st.counts) {
		st.counts = st.counts[:1]
	}
	if st.sums == nil {
		st.sums = make([]float64, m.Cols*m.Matrices)
		st.counts = make([]int64, 1)
	}
	if err := st.consistent(m, true); err != nil {
		return err
	}
	rows := 0
	for mat, x := range m.Rows {
		if mat < 0 || mat >= m.Matrices || len(x) != m.Cols {
			return fmt.Errorf("imatrix: product with %s gave row of %d values for matrix %d (want %d values, %d matrices)",
				m.Weight, len(x), mat, m.Cols, m.Matrices)
		}
		accumulate(st.sums[mat*m.Cols:(mat+1)*m.Cols], x)
		rows++
	}
	for i := range st.counts {
		st.counts[i] += int64(rows / m.Matrices)
	}
	return st.finite(m.Weight)
}

func (st *stat) consistent(m Matmul, countsOK bool) error {
	if st.cols != m.Cols || len(st.sums) != m.Cols*m.Matrices || !countsOK {
		return fmt.Errorf("imatrix: inconsistent sizes for %s: %d values in %d matrices before, %d columns × %d matrices now",
			m.Weight, len(st.sums), len(st.counts), m.Cols, m.Matrices)
	}
	return nil
}

// accumulate adds the squares of x to s in float64 (the conversion keeps the product from being fused, so
// every platform gives the same sums).
func accumulate(s []float64, x []float32) {
	s = s[:len(x)]
	for j, v := range x {
		f := float64(v)
		s[j] += float64(f * f)
	}
}

func (st *stat) finite(name string) error {
	for _, v := range st.sums {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return &ActivationError{Weight: name, Value: v}
		}
	}
	return nil
}

func allEqual(v []int64) bool {
	for _, x := range v[1:] {
		if x != v[0] {
			return false
		}
	}
	return true
}

// Len is the number of weights with statistics.
func (c *Collector) Len() int { return len(c.stats) }

// Matrix returns the statistics as a Matrix (sums rounded to float32), with the given metadata. With exact,
// the entries also carry the float64 sums (Entry.Exact), for a partial file a run can resume from.
func (c *Collector) Matrix(datasets []string, chunkCount, chunkSize int, exact bool) *Matrix {
	m := &Matrix{Datasets: slices.Clone(datasets), ChunkCount: chunkCount, ChunkSize: chunkSize}
	for name, st := range c.stats {
		e := Entry{Name: name, Cols: st.cols, Sums: make([]float32, len(st.sums)), Counts: make([]float64, len(st.counts))}
		if exact {
			e.Exact = slices.Clone(st.sums)
		}
		for i, v := range st.sums {
			e.Sums[i] = float32(v)
		}
		for i, v := range st.counts {
			e.Counts[i] = float64(v)
		}
		m.Entries = append(m.Entries, e)
	}
	slices.SortFunc(m.Entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return m
}

// Add merges the statistics of an earlier run into the collector, as llama-imatrix --in-file does: sums are
// added and counts (rounded to integers) too; one count from an older file is broadcast over the experts of an
// expert stack. A legacy matrix cannot be merged (its counts are not token counts).
func (c *Collector) Add(m *Matrix, file string) error {
	if m.Legacy {
		return &FormatError{File: file, Msg: "is in the legacy format, whose counts are not token counts; it cannot be continued"}
	}
	if c.stats == nil {
		c.stats = map[string]*stat{}
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := e.checkValues(file); err != nil {
			return err
		}
		st := c.stats[e.Name]
		if st == nil {
			st = &stat{cols: e.Cols, sums: make([]float64, len(e.Sums)), counts: make([]int64, len(e.Counts))}
			c.stats[e.Name] = st
		}
		if len(st.sums) != len(e.Sums) {
			return &FormatError{File: file, Tensor: e.Name, Msg: fmt.Sprintf("has %d sums, the statistics so far %d", len(e.Sums), len(st.sums))}
		}
		if len(st.counts) == 1 && len(e.Counts) > 1 {
			st.counts = slices.Repeat(st.counts, len(e.Counts))
		}
		if len(st.counts) != len(e.Counts) {
			return &FormatError{File: file, Tensor: e.Name, Msg: fmt.Sprintf("has %d counts, the statistics so far %d", len(e.Counts), len(st.counts))}
		}
		for j, v := range e.Sums {
			if e.Exact != nil {
				st.sums[j] += e.Exact[j]
			} else {
				st.sums[j] += float64(v)
			}
		}
		for j, v := range e.Counts {
			st.counts[j] += int64(math.Round(v))
		}
	}
	return nil
}
