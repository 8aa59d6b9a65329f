package imatrix

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Importance is what llama-quantize takes from an imatrix file: per weight, the importance of every column
// (for an expert stack, Cols values per expert, expert after expert), plus what it records in the output's
// quantize.imatrix.* keys. An Importance loaded from a GGUF file reads each weight's values from the file when
// Vector asks for them, so a quantization holds one tensor's vector at a time; Close releases the file.
type Importance struct {
	// File is the path the matrix was read from (quantize.imatrix.file).
	File string `json:"file"`
	// Datasets are the file's dataset names (quantize.imatrix.dataset is the first).
	Datasets []string `json:"datasets,omitempty"`
	// Chunks is the file's chunk count (quantize.imatrix.chunks_count when positive).
	Chunks int `json:"chunks"`
	// Legacy is true for a legacy-format file.
	Legacy bool `json:"legacy,omitempty"`
	// SHA256 is the file's sha256 (set by Load).
	SHA256 string `json:"sha256,omitempty"`

	names  []string       // sorted
	sizes  map[string]int // values per entry
	vector func(name string) ([]float32, error)
	close  func() error
}

// Len is the number of entries (quantize.imatrix.entries_count).
func (im *Importance) Len() int { return len(im.names) }

// Names lists the entries, sorted.
func (im *Importance) Names() []string { return append([]string(nil), im.names...) }

// Size returns the number of values of an entry (Cols × matrices), and whether there is one.
func (im *Importance) Size(name string) (int, bool) {
	n, ok := im.sizes[name]
	return n, ok
}

// Vector returns a new slice with the importance values of an entry, or nil when there is none.
func (im *Importance) Vector(name string) ([]float32, error) {
	if _, ok := im.sizes[name]; !ok {
		return nil, nil
	}
	return im.vector(name)
}

// Close releases the file behind a loaded Importance.
func (im *Importance) Close() error {
	if im == nil || im.close == nil {
		return nil
	}
	c := im.close
	im.close = nil
	return c()
}

// Load opens an imatrix file (either format) for quantization. Every value is checked first, as
// llama-quantize checks them all before it starts (see Matrix.Importance for the arithmetic and the checks);
// for a GGUF file only the index stays in memory and Vector reads one entry at a time, for the legacy format
// the whole file is held.
func Load(path string) (*Importance, error) {
	_, sum, err := fsx.HashFile(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	im, err := load(path)
	if err != nil {
		return nil, err
	}
	im.SHA256 = sum
	return im, nil
}

func load(path string) (*Importance, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	var magic [4]byte
	n, _ := f.ReadAt(magic[:], 0)
	if !st.Mode().IsRegular() || n < 4 || !bytes.Equal(magic[:], []byte(gguf.Magic)) {
		f.Close()
		m, err := Read(path)
		if err != nil {
			return nil, err
		}
		return m.Importance(path)
	}
	im, err := loadGGUF(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	im.close = f.Close
	return im, nil
}

func loadGGUF(r io.ReaderAt, size int64, path string) (*Importance, error) {
	f, err := gguf.Open(r, size, path)
	if err != nil {
		return nil, &FormatError{File: path, Msg: err.Error()}
	}
	m, index, err := indexGGUF(f)
	if err != nil {
		return nil, err
	}
	im := &Importance{File: path, Datasets: m.Datasets, Chunks: m.ChunkCount, sizes: make(map[string]int, len(index))}
	byName := make(map[string]ggufEntry, len(index))
	for _, ie := range index {
		e, err := ie.read(f, false)
		if err != nil {
			return nil, err
		}
		if _, err := e.importance(path, false); err != nil {
			return nil, err
		}
		im.names = append(im.names, ie.name)
		im.sizes[ie.name] = len(e.Sums)
		byName[ie.name] = ie
	}
	im.vector = func(name string) ([]float32, error) {
		e, err := byName[name].read(f, false)
		if err != nil {
			return nil, err
		}
		return e.importance(path, false)
	}
	return im, nil
}

// Importance computes the per-column values llama-quantize's load_imatrix derives from m (file names m in
// errors): for the GGUF format, in_sum2 / count for every matrix, the count rounded to an integer (lround) and
// converted to float, or 1 for every column of a matrix whose count is 0; for the legacy format, sums / ncall,
// or the sums as they are when ncall is 0. All arithmetic is float32, as in llama.cpp.
//
// Sums and counts must be finite and not negative; llama-quantize stops on non-finite importance values and
// would use negative ones, which no sum of squares produces: both are a *ValueError naming the entry.
func (m *Matrix) Importance(file string) (*Importance, error) {
	im := &Importance{File: file, Datasets: m.Datasets, Chunks: m.ChunkCount, Legacy: m.Legacy,
		sizes: make(map[string]int, len(m.Entries))}
	vectors := make(map[string][]float32, len(m.Entries))
	for i := range m.Entries {
		e := &m.Entries[i]
		v, err := e.importance(file, m.Legacy)
		if err != nil {
			return nil, err
		}
		vectors[e.Name] = v
		im.names = append(im.names, e.Name)
		im.sizes[e.Name] = len(v)
	}
	sort.Strings(im.names)
	im.vector = func(name string) ([]float32, error) { return append([]float32(nil), vectors[name]...), nil }
	return im, nil
}

// importance checks the entry's values and computes its importance vector (see Matrix.Importance).
func (e *Entry) importance(file string, legacy bool) ([]float32, error) {
	if err := e.checkValues(file); err != nil {
		return nil, err
	}
	v := make([]float32, len(e.Sums))
	if legacy {
		ncall := float32(int64(e.Counts[0]))
		if ncall > 0 {
			for j, s := range e.Sums {
				v[j] = s / ncall
			}
		} else {
			copy(v, e.Sums)
		}
	} else {
		for j, c := range e.Counts {
			count := float32(int64(math.Round(c))) // std::lround, then (float)
			row, sums := v[j*e.Cols:(j+1)*e.Cols], e.Sums[j*e.Cols:(j+1)*e.Cols]
			for k := range row {
				if count > 0 {
					row[k] = sums[k] / count
				} else {
					row[k] = 1
				}
			}
		}
	}
	for j, x := range v { // a finite sum over a tiny count can still overflow float32
		if math.IsInf(float64(x), 0) {
			return nil, &ValueError{File: file, Tensor: e.Name, Index: j, Value: float64(x), What: "importance"}
		}
	}
	return v, nil
}
