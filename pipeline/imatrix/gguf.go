package imatrix

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// ReadGGUF parses an imatrix in llama.cpp's GGUF format from r (size bytes; name is used in errors), as
// common_imatrix_load does: the three imatrix.* keys must be present (llama-quantize refuses a GGUF imatrix
// without them), and for every NAME.in_sum2 there must be an F32 NAME.counts (and the reverse). Other tensors,
// such as the NAME.in_sum of newer llama-imatrix builds, are ignored.
func ReadGGUF(r io.ReaderAt, size int64, name string) (*Matrix, error) {
	f, err := gguf.Open(r, size, name)
	if err != nil {
		return nil, &FormatError{File: name, Msg: err.Error()}
	}
	m, index, err := indexGGUF(f)
	if err != nil {
		return nil, err
	}
	for _, ie := range index {
		e, err := ie.read(f, true)
		if err != nil {
			return nil, err
		}
		m.Entries = append(m.Entries, e)
	}
	return m, m.check(name)
}

// ggufEntry locates one entry's tensors in a GGUF imatrix.
type ggufEntry struct {
	name                string
	cols                int
	sums, counts, exact *gguf.TensorInfo
}

// indexGGUF reads the metadata of a GGUF imatrix and pairs its tensors into entries (sorted by name, checked for
// types and sizes), without reading any tensor data.
func indexGGUF(f *gguf.File) (*Matrix, []ggufEntry, error) {
	name := f.Name
	m := &Matrix{}
	if err := readMeta(f, m); err != nil {
		return nil, nil, err
	}
	for _, kv := range f.KVs {
		if s, ok := kv.Value.V.(string); ok && kv.Key != KeyType && !strings.HasPrefix(kv.Key, "imatrix.") {
			if m.Meta == nil {
				m.Meta = map[string]string{}
			}
			m.Meta[kv.Key] = s
		}
	}
	type pair struct{ sums, counts, means, exact *gguf.TensorInfo }
	byName := map[string]*pair{}
	var order []string
	for i := range f.Tensors {
		t := &f.Tensors[i]
		var base string
		var slot **gguf.TensorInfo
		get := func(b string) *pair {
			p := byName[b]
			if p == nil {
				p = &pair{}
				byName[b] = p
				order = append(order, b)
			}
			return p
		}
		switch {
		case strings.HasSuffix(t.Name, suffixExact):
			base = strings.TrimSuffix(t.Name, suffixExact)
			slot = &get(base).exact
		case strings.HasSuffix(t.Name, SuffixSums):
			base = strings.TrimSuffix(t.Name, SuffixSums)
			slot = &get(base).sums
		case strings.HasSuffix(t.Name, SuffixCounts):
			base = strings.TrimSuffix(t.Name, SuffixCounts)
			slot = &get(base).counts
		case strings.HasSuffix(t.Name, suffixMeans):
			base = strings.TrimSuffix(t.Name, suffixMeans)
			slot = &get(base).means
		default:
			continue
		}
		if base == "" {
			continue // common_imatrix_load skips an empty name
		}
		*slot = t
	}
	if len(order) > maxEntries {
		return nil, nil, &FormatError{File: name, Msg: fmt.Sprintf("%d entries, at most %d", len(order), maxEntries)}
	}
	sort.Strings(order)
	var index []ggufEntry
	for _, base := range order {
		p := byName[base]
		// Both orphans (an in_sum2 without counts or the reverse) make common_imatrix_load fail; an in_sum alone
		// is nothing it would pair.
		if (p.sums == nil) != (p.counts == nil) {
			return nil, nil, &FormatError{File: name, Tensor: base, Msg: "has no matching in_sum2 and counts tensors"}
		}
		if p.sums == nil {
			continue
		}
		if p.means != nil && p.means.NumElements() != p.sums.NumElements() {
			return nil, nil, &FormatError{File: name, Tensor: base, Msg: "has in_sum and in_sum2 tensors of different sizes"}
		}
		for _, t := range []*gguf.TensorInfo{p.sums, p.counts} {
			if t.Type != gguf.TypeF32 {
				return nil, nil, &FormatError{File: name, Tensor: base, Msg: fmt.Sprintf("tensor %s is %s, want F32", t.Name, t.Type)}
			}
		}
		nval, ncount := p.sums.NumElements(), p.counts.NumElements()
		if ncount == 0 || nval == 0 || nval%ncount != 0 {
			return nil, nil, &FormatError{File: name, Tensor: base, Msg: fmt.Sprintf("has %d sums for %d counts; want a whole number of columns per count",
				nval, ncount)}
		}
		if p.exact != nil && (p.exact.Type != gguf.TypeF64 || p.exact.NumElements() != nval) {
			return nil, nil, &FormatError{File: name, Tensor: base, Msg: fmt.Sprintf("tensor %s is %s of %d values, want F64 of %d",
				p.exact.Name, p.exact.Type, p.exact.NumElements(), nval)}
		}
		index = append(index, ggufEntry{name: base, cols: int(nval / ncount), sums: p.sums, counts: p.counts, exact: p.exact})
	}
	if len(index) == 0 {
		return nil, nil, &FormatError{File: name, Msg: "no importance data (no NAME.in_sum2 / NAME.counts tensors)"}
	}
	return m, index, nil
}

// read reads the entry's data (its exact sums too when exact is set).
func (ie ggufEntry) read(f *gguf.File, exact bool) (Entry, error) {
	e := Entry{Name: ie.name, Cols: ie.cols}
	var err error
	if e.Sums, err = readF32(f, ie.sums); err != nil {
		return Entry{}, err
	}
	counts, err := readF32(f, ie.counts)
	if err != nil {
		return Entry{}, err
	}
	e.Counts = make([]float64, len(counts))
	for i, c := range counts {
		e.Counts[i] = float64(c)
	}
	if exact && ie.exact != nil {
		if e.Exact, err = readF64(f, ie.exact); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}

// readMeta reads the imatrix.* keys; all three are required, as llama-quantize requires them.
func readMeta(f *gguf.File, m *Matrix) error {
	ds, okD := f.KV(KeyDatasets)
	cc, okC := f.KV(KeyChunkCount)
	cs, okS := f.KV(KeyChunkSize)
	if !okD || !okC || !okS {
		what := "a GGUF file"
		if t := f.String(KeyType); t != "" && t != TypeValue {
			what = fmt.Sprintf("a %q GGUF, not an importance matrix", t)
		} else if f.Architecture() != "" {
			what = "a model GGUF, not an importance matrix"
		}
		return &FormatError{File: f.Name, Msg: fmt.Sprintf("%s without the imatrix metadata (%s, %s, %s)", what, KeyDatasets, KeyChunkCount, KeyChunkSize)}
	}
	if a, ok := ds.V.(gguf.Array); ok && a.Elem == gguf.ValueString {
		names, _ := a.Values.([]string)
		if len(names) > maxDatasets {
			return &FormatError{File: f.Name, Msg: fmt.Sprintf("%s has %d names, at most %d", KeyDatasets, len(names), maxDatasets)}
		}
		m.Datasets = append([]string(nil), names...)
	} else {
		return &FormatError{File: f.Name, Msg: fmt.Sprintf("%s is %s, want an array of strings", KeyDatasets, ds.Type)}
	}
	for _, kv := range []struct {
		key string
		v   gguf.Value
		dst *int
	}{{KeyChunkCount, cc, &m.ChunkCount}, {KeyChunkSize, cs, &m.ChunkSize}} {
		u, ok := kv.v.V.(uint32)
		if !ok {
			return &FormatError{File: f.Name, Msg: fmt.Sprintf("%s is %s, want uint32", kv.key, kv.v.Type)}
		}
		if uint64(u) > math.MaxInt32 {
			return &FormatError{File: f.Name, Msg: fmt.Sprintf("%s %d out of range", kv.key, u)}
		}
		*kv.dst = int(u)
	}
	return nil
}

func readF32(f *gguf.File, t *gguf.TensorInfo) ([]float32, error) {
	raw, err := readRaw(f, t)
	if err != nil {
		return nil, err
	}
	v := make([]float32, len(raw)/4)
	half.DecodeF32LE(v, raw)
	return v, nil
}

func readF64(f *gguf.File, t *gguf.TensorInfo) ([]float64, error) {
	raw, err := readRaw(f, t)
	if err != nil {
		return nil, err
	}
	v := make([]float64, len(raw)/8)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return v, nil
}

func readRaw(f *gguf.File, t *gguf.TensorInfo) ([]byte, error) {
	r, err := f.TensorReader(t.Name)
	if err != nil {
		return nil, &FormatError{File: f.Name, Msg: err.Error()}
	}
	raw := make([]byte, r.Size())
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, &FormatError{File: f.Name, Msg: fmt.Sprintf("tensor %s: %v", t.Name, err)}
	}
	return raw, nil
}

// WriteGGUF writes m in llama.cpp's GGUF imatrix format, as llama-imatrix's save_imatrix does: general.type,
// imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size, then for every entry in name order
// NAME.in_sum2 (F32, ggml shape [Cols, n_mat]) and NAME.counts (F32, [1, n_mat]), with trailing dimensions of
// size 1 dropped as ggml_n_dims does. A legacy matrix is written with its counts scaled back to tokens when
// its chunk size is known; otherwise it cannot be written in this format.
func (m *Matrix) WriteGGUF(out io.Writer) error {
	if m.Legacy {
		return errors.New("imatrix: a matrix read from the legacy format has no token counts; it cannot be written as GGUF")
	}
	if err := m.check("(writing)"); err != nil {
		return err
	}
	w := gguf.NewWriter()
	datasets := m.Datasets
	if datasets == nil {
		datasets = []string{}
	}
	for _, kv := range []struct {
		k string
		v gguf.Value
	}{
		{KeyType, gguf.String(TypeValue)},
		{KeyDatasets, gguf.Strings(datasets)},
		{KeyChunkCount, gguf.Uint32(uint32(m.ChunkCount))},
		{KeyChunkSize, gguf.Uint32(uint32(m.ChunkSize))},
	} {
		if err := w.SetKV(kv.k, kv.v); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(m.Meta))
	for k := range m.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == KeyType || strings.HasPrefix(k, "imatrix.") {
			return fmt.Errorf("imatrix: extra metadata key %q would replace a standard one", k)
		}
		if err := w.SetKV(k, gguf.String(m.Meta[k])); err != nil {
			return err
		}
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		n := uint64(len(e.Counts))
		if err := w.AddTensor(e.Name+SuffixSums, gguf.TypeF32, nDims(uint64(e.Cols), n)); err != nil {
			return fmt.Errorf("imatrix: entry %q: %w", e.Name, err)
		}
		if err := w.AddTensor(e.Name+SuffixCounts, gguf.TypeF32, nDims(1, n)); err != nil {
			return fmt.Errorf("imatrix: entry %q: %w", e.Name, err)
		}
		if e.Exact != nil {
			if err := w.AddTensor(e.Name+suffixExact, gguf.TypeF64, nDims(uint64(e.Cols), n)); err != nil {
				return fmt.Errorf("imatrix: entry %q: %w", e.Name, err)
			}
		}
	}
	if err := w.WriteHeader(out); err != nil {
		return err
	}
	var buf []byte
	for i := range m.Entries {
		e := &m.Entries[i]
		buf = f32Bytes(buf, e.Sums)
		if err := w.WriteTensor(e.Name+SuffixSums, buf); err != nil {
			return err
		}
		counts := make([]float32, len(e.Counts))
		for j, c := range e.Counts {
			counts[j] = float32(c) // (float) stat.counts[j]
		}
		buf = f32Bytes(buf, counts)
		if err := w.WriteTensor(e.Name+SuffixCounts, buf); err != nil {
			return err
		}
		if e.Exact != nil {
			buf = buf[:0]
			for _, x := range e.Exact {
				buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(x))
			}
			if err := w.WriteTensor(e.Name+suffixExact, buf); err != nil {
				return err
			}
		}
	}
	return w.Finish()
}

// nDims is the shape [a, b] as ggml_n_dims writes it: [a] when b is 1.
func nDims(a, b uint64) []uint64 {
	if b == 1 {
		return []uint64{a}
	}
	return []uint64{a, b}
}

func f32Bytes(buf []byte, v []float32) []byte {
	if cap(buf) < 4*len(v) {
		buf = make([]byte, 4*len(v))
	}
	buf = buf[:4*len(v)]
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return buf
}
