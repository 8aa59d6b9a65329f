package imatrix

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// ReadDat parses the legacy imatrix format (the .dat files of llama-imatrix before the GGUF format, still read by
// llama-quantize; common_imatrix_load_legacy): int32 n_entries (at least 1); per entry int32 name length, the
// name, int32 ncall, int32 nval (at least 1) and nval float32 sums stored as mean × ncall; then, optionally,
// int32 chunk count, int32 dataset-name length and the name. All integers little-endian. size is the number of
// bytes r holds; every length is checked against the bytes that remain before anything is allocated. The
// entries' Counts hold ncall, their Cols nval (the format does not separate experts).
func ReadDat(r io.Reader, size int64, name string) (*Matrix, error) {
	d := &datReader{r: bufio.NewReaderSize(r, 1<<16), left: size, name: name}
	n, err := d.i32("entry count")
	if err != nil {
		return nil, err
	}
	// An entry takes at least 4+4+4+4 bytes (empty name, one value).
	if n < 1 || int64(n) > d.left/16 || n > maxEntries {
		return nil, &FormatError{File: name, Msg: fmt.Sprintf("entry count %d: not a legacy imatrix (want 1..%d for %d bytes)", n, min(d.left/16, maxEntries), size)}
	}
	m := &Matrix{Legacy: true, Entries: make([]Entry, 0, n)}
	for i := range int(n) {
		what := fmt.Sprintf("entry %d", i+1)
		ename, err := d.str(what + " name")
		if err != nil {
			return nil, err
		}
		if ename == "" {
			return nil, &FormatError{File: name, Msg: what + " has an empty name"}
		}
		ncall, err := d.i32(what + " ncall")
		if err != nil {
			return nil, err
		}
		nval, err := d.i32(what + " value count")
		if err != nil {
			return nil, err
		}
		if nval < 1 || int64(nval) > d.left/4 {
			return nil, &FormatError{File: name, Tensor: ename, Msg: fmt.Sprintf("declares %d values, %d bytes remain", nval, d.left)}
		}
		raw, err := d.bytes(4*int64(nval), what+" values")
		if err != nil {
			return nil, err
		}
		e := Entry{Name: ename, Cols: int(nval), Counts: []float64{float64(ncall)}, Sums: make([]float32, nval)}
		for j := range e.Sums {
			e.Sums[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
		m.Entries = append(m.Entries, e)
	}
	// The trailer is optional, and llama.cpp reads as much of it as is there.
	if d.left >= 4 {
		cc, _ := d.i32("chunk count")
		m.ChunkCount = max(0, int(cc))
		if d.left >= 4 {
			l, _ := d.i32("dataset name length")
			if l > 0 && int64(l) <= d.left && l <= maxNameLen {
				b, err := d.bytes(int64(l), "dataset name")
				if err == nil {
					m.Datasets = []string{cString(b)}
				}
			}
		}
	}
	if err := m.sortEntries(name); err != nil {
		return nil, err
	}
	return m, m.check(name)
}

// cString is the bytes up to the first NUL, as llama.cpp reads the names into C strings.
func cString(b []byte) string {
	if i := slices.Index(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

type datReader struct {
	r    *bufio.Reader
	left int64
	name string
	buf  [4]byte
}

func (d *datReader) bytes(n int64, what string) ([]byte, error) {
	if n < 0 || n > d.left {
		return nil, &FormatError{File: d.name, Msg: fmt.Sprintf("%s: file ends early (%d bytes needed, %d remain)", what, n, d.left)}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, &FormatError{File: d.name, Msg: fmt.Sprintf("%s: %v", what, err)}
	}
	d.left -= n
	return b, nil
}

func (d *datReader) i32(what string) (int32, error) {
	if d.left < 4 {
		return 0, &FormatError{File: d.name, Msg: what + ": file ends early"}
	}
	if _, err := io.ReadFull(d.r, d.buf[:]); err != nil {
		return 0, &FormatError{File: d.name, Msg: fmt.Sprintf("%s: %v", what, err)}
	}
	d.left -= 4
	return int32(binary.LittleEndian.Uint32(d.buf[:])), nil
}

func (d *datReader) str(what string) (string, error) {
	l, err := d.i32(what + " length")
	if err != nil {
		return "", err
	}
	if l < 0 || l > maxNameLen || int64(l) > d.left {
		return "", &FormatError{File: d.name, Msg: fmt.Sprintf("%s length %d out of range", what, l)}
	}
	b, err := d.bytes(int64(l), what)
	if err != nil {
		return "", err
	}
	return cString(b), nil
}

// WriteDat writes m in the legacy format as llama-imatrix's save_imatrix_legacy does: entries whose every
// count is zero are left out (they are returned in skipped); the rest in name order, each with
// ncall = ⌈max(counts) / ChunkSize⌉ and every value stored as (sum / count) × ncall in float32, with sum and
// count taken as 1 for a matrix that saw no token; then the chunk count and the last dataset name. The format
// cannot tell experts apart: an expert stack becomes one vector of Cols × n_mat values.
func (m *Matrix) WriteDat(out io.Writer) (skipped []string, err error) {
	if err := m.check("(writing)"); err != nil {
		return nil, err
	}
	if m.Legacy {
		return nil, errors.New("imatrix: a matrix read from the legacy format is written back as it was read; convert from the source file instead")
	}
	if m.ChunkSize <= 0 {
		return nil, errors.New("imatrix: the legacy format needs the chunk size, which this matrix does not have")
	}
	var stored []*Entry
	for i := range m.Entries {
		e := &m.Entries[i]
		if slices.Max(e.Counts) <= 0 {
			skipped = append(skipped, e.Name)
			continue
		}
		stored = append(stored, e)
	}
	if len(stored) > math.MaxInt32 {
		return nil, errors.New("imatrix: too many entries for the legacy format")
	}
	w := bufio.NewWriter(out)
	put := func(v int32) { _ = binary.Write(w, binary.LittleEndian, v) }
	put(int32(len(stored)))
	chunk := int64(m.ChunkSize)
	for _, e := range stored {
		if len(e.Name) > math.MaxInt32 || len(e.Sums) > math.MaxInt32 {
			return nil, fmt.Errorf("imatrix: entry %q too large for the legacy format", e.Name)
		}
		put(int32(len(e.Name)))
		w.WriteString(e.Name)
		maxCount := int64(slices.Max(e.Counts))
		ncall := (maxCount + chunk - 1) / chunk // ceiling division, so no entry gets ncall 0
		put(int32(ncall))
		put(int32(len(e.Sums)))
		per := len(e.Sums) / len(e.Counts)
		var b [4]byte
		for i, s := range e.Sums {
			count := float32(e.Counts[i/per])
			value := s
			if count == 0 {
				value, count = 1, 1 // "store 1 for partial data"
			}
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(float32(value/count)*float32(ncall)))
			w.Write(b[:])
		}
	}
	put(int32(m.ChunkCount))
	dataset := ""
	if len(m.Datasets) > 0 {
		dataset = m.Datasets[len(m.Datasets)-1]
	}
	put(int32(len(dataset)))
	w.WriteString(dataset)
	return skipped, w.Flush()
}
