package imatrix

import (
	"math"
	"sort"
)

// Importance is what llama-quantize takes from an imatrix file: per weight, the importance of every column
// (for an expert stack, Cols values per expert, expert after expert), plus what it records in the output's
// quantize.imatrix.* keys.
type Importance struct {
	// File is the path the matrix was read from (quantize.imatrix.file).
	File string `json:"file"`
	// Datasets are the file's dataset names (quantize.imatrix.dataset is the first).
	Datasets []string `json:"datasets,omitempty"`
	// Chunks is the file's chunk count (quantize.imatrix.chunks_count when positive).
	Chunks int `json:"chunks"`
	// Legacy is true for a legacy-format file.
	Legacy bool `json:"legacy,omitempty"`
	// Vectors maps a weight name to its importance values.
	Vectors map[string][]float32 `json:"-"`
}

// Len is the number of entries (quantize.imatrix.entries_count).
func (im *Importance) Len() int { return len(im.Vectors) }

// Names lists the entries, sorted.
func (im *Importance) Names() []string {
	names := make([]string, 0, len(im.Vectors))
	for n := range im.Vectors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Load reads an imatrix file (either format) and computes the importance vectors as llama-quantize does.
func Load(path string) (*Importance, error) {
	m, err := Read(path)
	if err != nil {
		return nil, err
	}
	return m.Importance(path)
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
		Vectors: make(map[string][]float32, len(m.Entries))}
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := e.checkValues(file); err != nil {
			return nil, err
		}
		v := make([]float32, len(e.Sums))
		if m.Legacy {
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
		im.Vectors[e.Name] = v
	}
	return im, nil
}
