package imatrix

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Metadata keys of the GGUF imatrix format (tools/imatrix/imatrix.cpp, common/imatrix-loader.h).
const (
	KeyType       = "general.type"
	KeyDatasets   = "imatrix.datasets"
	KeyChunkCount = "imatrix.chunk_count"
	KeyChunkSize  = "imatrix.chunk_size"

	// TypeValue is general.type of an imatrix GGUF.
	TypeValue = "imatrix"

	// SuffixSums and SuffixCounts name an entry's two tensors: NAME.in_sum2 and NAME.counts.
	SuffixSums   = ".in_sum2"
	SuffixCounts = ".counts"
	// suffixExact is NAME.in_sum2_f64, phonellm's float64 copy of in_sum2 in partial files (see Entry.Exact).
	suffixExact = ".in_sum2_f64"
	// suffixMeans is NAME.in_sum, the per-column sum of activations newer llama-imatrix builds add; readers
	// ignore it (only its size is checked against in_sum2, as common/imatrix-loader.cpp does).
	suffixMeans = ".in_sum"
)

// Bounds on what a file may declare, so that a hostile file cannot make the readers allocate without end.
const (
	maxEntries  = 1 << 20 // entries in one file
	maxNameLen  = 1 << 12 // bytes of an entry or dataset name (legacy format)
	maxDatasets = 1 << 16
)

// Matrix is an importance matrix as llama-imatrix stores it: per weight, the raw sums of squared inputs and the
// token counts.
type Matrix struct {
	// Datasets names the calibration data (imatrix.datasets; the legacy format holds at most one).
	Datasets []string `json:"datasets"`
	// ChunkCount is the number of ChunkSize-token chunks the statistics cover (imatrix.chunk_count).
	ChunkCount int `json:"chunk_count"`
	// ChunkSize is the chunk length in tokens (imatrix.chunk_size); 0 for a legacy file, which does not store it.
	ChunkSize int `json:"chunk_size"`
	// Legacy is true for a matrix read from the legacy .dat format: its Counts are the ncall values and its
	// Sums hold mean × ncall, as that format stores them.
	Legacy bool `json:"legacy,omitempty"`
	// Entries are sorted by name, names unique.
	Entries []Entry `json:"entries"`
	// Meta holds other string metadata of a GGUF imatrix (phonellm's own keys), written after the imatrix
	// keys in key order; llama.cpp ignores them.
	Meta map[string]string `json:"meta,omitempty"`
}

// Entry is the statistics of one weight tensor.
type Entry struct {
	// Name is the weight tensor's name in the model GGUF ("blk.0.attn_q.weight").
	Name string `json:"name"`
	// Sums holds len(Counts) rows of Cols values (matrix-major, as in_sum2's ggml shape [Cols, n_mat]): the sum
	// of the squared input of every column over the tokens that went through that matrix.
	Sums []float32 `json:"-"`
	// Counts holds the tokens per matrix (one value for a dense tensor, one per expert for an expert stack);
	// for a legacy matrix, the single ncall value. The GGUF format stores them as F32 (llama.cpp rounds them to
	// integers when it reads them); they are kept in float64 here so that counts collected in memory stay
	// exact until they are written.
	Counts []float64 `json:"counts"`
	// Cols is the row length of the weight (its ggml ne[0]), the number of columns the sums cover.
	Cols int `json:"cols"`
	// Exact, when not nil, holds the sums in float64 (Sums are these rounded to float32). Partial files of a
	// resumable run carry them as NAME.in_sum2_f64 so that a resumed run continues from the same state and
	// gives the same file as an uninterrupted one; llama.cpp ignores that tensor.
	Exact []float64 `json:"-"`
}

// Matrices is the number of matrices (experts) the entry covers.
func (e *Entry) Matrices() int { return len(e.Counts) }

// Entry returns the entry of a weight, or nil.
func (m *Matrix) Entry(name string) *Entry {
	i, ok := slices.BinarySearchFunc(m.Entries, name, func(e Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return nil
	}
	return &m.Entries[i]
}

// sortEntries orders the entries by name and rejects duplicates.
func (m *Matrix) sortEntries(file string) error {
	slices.SortFunc(m.Entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(m.Entries); i++ {
		if m.Entries[i].Name == m.Entries[i-1].Name {
			return &FormatError{File: file, Tensor: m.Entries[i].Name, Msg: "appears twice"}
		}
	}
	return nil
}

// check verifies the entries: sorted by name and unique, each with a non-empty name, at least one matrix and
// Cols × matrices sums.
func (m *Matrix) check(file string) error {
	if m.ChunkCount < 0 || m.ChunkSize < 0 {
		return &FormatError{File: file, Msg: fmt.Sprintf("negative chunk count %d or chunk size %d", m.ChunkCount, m.ChunkSize)}
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		switch {
		case e.Name == "":
			return &FormatError{File: file, Msg: fmt.Sprintf("entry %d has an empty name", i)}
		case len(e.Counts) == 0:
			return &FormatError{File: file, Tensor: e.Name, Msg: "has no counts"}
		case e.Cols <= 0 || len(e.Sums) != e.Cols*len(e.Counts):
			return &FormatError{File: file, Tensor: e.Name, Msg: fmt.Sprintf("has %d sums for %d matrices of %d columns",
				len(e.Sums), len(e.Counts), e.Cols)}
		case i > 0 && e.Name <= m.Entries[i-1].Name:
			return &FormatError{File: file, Tensor: e.Name, Msg: "is out of name order or appears twice (entries are sorted by name, names unique)"}
		case e.Exact != nil && len(e.Exact) != len(e.Sums):
			return &FormatError{File: file, Tensor: e.Name, Msg: fmt.Sprintf("has %d exact sums for %d sums", len(e.Exact), len(e.Sums))}
		}
		for j, x := range e.Exact {
			if float32(x) != e.Sums[j] && !(x != x && e.Sums[j] != e.Sums[j]) {
				return &FormatError{File: file, Tensor: e.Name, Msg: fmt.Sprintf("exact sum %d (%v) does not round to its sum (%v)", j, x, e.Sums[j])}
			}
		}
	}
	return nil
}

// FormatError reports an imatrix file that is not what it should be: bad bytes, a missing key, an entry whose
// sizes do not agree. It is an input error (exit 3).
type FormatError struct {
	File   string
	Tensor string // the entry concerned, when there is one
	Msg    string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("imatrix: %s: entry %q %s", e.File, e.Tensor, e.Msg)
	}
	return fmt.Sprintf("imatrix: %s: %s", e.File, e.Msg)
}

// InputError marks a malformed imatrix file as bad input.
func (e *FormatError) InputError() bool { return true }

// ValueError reports a value llama-quantize cannot use: a NaN or infinite importance (llama-quantize stops with
// "imatrix contains non-finite value"), or a negative one (which no sum of squares gives; llama-quantize would
// quantize with it). It is an input error (exit 3).
type ValueError struct {
	File   string
	Tensor string
	Index  int // position in the entry's values
	Value  float64
	What   string // "sum", "count" or "importance"
}

func (e *ValueError) Error() string {
	kind := "non-finite"
	if !math.IsNaN(e.Value) && !math.IsInf(e.Value, 0) {
		kind = "negative"
	}
	return fmt.Sprintf("imatrix: %s: entry %q has a %s %s at %d (%v); the file is damaged or not an importance matrix",
		e.File, e.Tensor, kind, e.What, e.Index, e.Value)
}

// InputError marks a bad value as bad input.
func (e *ValueError) InputError() bool { return true }

// checkValues rejects non-finite and negative sums and counts.
func (e *Entry) checkValues(file string) error {
	for i, v := range e.Sums {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return &ValueError{File: file, Tensor: e.Name, Index: i, Value: f, What: "sum"}
		}
	}
	for i, f := range e.Counts {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return &ValueError{File: file, Tensor: e.Name, Index: i, Value: f, What: "count"}
		}
	}
	return nil
}
