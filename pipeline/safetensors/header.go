package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
	"unicode/utf8"
)

// MaxHeaderSize caps the JSON header length read from a file; upstream
// safetensors rejects headers above 100,000,000 bytes (MAX_HEADER_SIZE in
// safetensors/src/tensor.rs).
const MaxHeaderSize = 100_000_000

// maxRank bounds the number of dimensions of one tensor.
const maxRank = 32

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name   string
	DType  DType
	Shape  []int64 // PyTorch order (row-major, last dim fastest)
	File   string  // path of the file it lives in
	Offset int64   // absolute byte offset in File
	Size   int64   // bytes
}

// NumElements returns the product of the shape (1 for a scalar). Shapes of
// TensorInfos from this package are checked not to overflow.
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t TensorInfo) clone() TensorInfo {
	t.Shape = slices.Clone(t.Shape)
	return t
}

// numElements multiplies a shape, rejecting negative dimensions and
// products that overflow int64.
func numElements(shape []int64) (int64, error) {
	if len(shape) > maxRank {
		return 0, fmt.Errorf("rank %d exceeds the limit of %d dimensions", len(shape), maxRank)
	}
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v has more than 2^63 elements", shape)
		}
		n = lo
	}
	return int64(n), nil
}

// byteSize returns the bytes of a tensor of the given dtype and shape.
func byteSize(dt DType, shape []int64) (int64, error) {
	n, err := numElements(shape)
	if err != nil {
		return 0, err
	}
	b := dt.Bits()
	hi, lo := bits.Mul64(uint64(n), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("shape %v of %s overflows the byte count", shape, dt)
	}
	if lo%8 != 0 {
		return 0, fmt.Errorf("shape %v of %s is not a whole number of bytes", shape, dt)
	}
	return int64(lo / 8), nil
}

// parseHeader reads and validates the header of a safetensors file of the
// given size. It returns the tensors sorted by offset and the metadata.
func parseHeader(r io.ReaderAt, size int64, path string) ([]TensorInfo, map[string]string, error) {
	if size < 8 {
		return nil, nil, formatErr(path, "", "file is %d bytes, too short for the 8-byte header length (truncated?)", size)
	}
	var lenBuf [8]byte
	if err := readFullAt(r, lenBuf[:], 0); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: read header length: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, nil, formatErr(path, "", "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, nil, formatErr(path, "", "header length %d runs past the end of the %d-byte file (truncated?)", n, size)
	}
	if n < 2 {
		return nil, nil, formatErr(path, "", "header length %d is too short for a JSON object", n)
	}
	buf := make([]byte, n)
	if err := readFullAt(r, buf, 8); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: read %d-byte header: %w", path, n, err)
	}
	dataStart := int64(8 + n)
	dataLen := size - dataStart
	infos, meta, err := decodeHeader(buf, path, dataStart, dataLen)
	if err != nil {
		return nil, nil, err
	}
	return infos, meta, nil
}

func decodeHeader(buf []byte, path string, dataStart, dataLen int64) ([]TensorInfo, map[string]string, error) {
	if buf[0] != '{' {
		return nil, nil, formatErr(path, "", "header does not start with '{'")
	}
	if !utf8.Valid(buf) {
		return nil, nil, formatErr(path, "", "header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, nil, formatErr(path, "", "header JSON: %v", err)
	}
	var (
		infos []TensorInfo
		meta  map[string]string
		seen  = map[string]bool{}
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, formatErr(path, "", "header JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, formatErr(path, "", "header JSON: key %v is not a string", tok)
		}
		if seen[name] {
			return nil, nil, formatErr(path, name, "appears twice in the header")
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, formatErr(path, name, "header JSON: %v", err)
		}
		if name == "__metadata__" {
			if meta, err = decodeMetadata(raw); err != nil {
				return nil, nil, formatErr(path, "", "__metadata__: %v", err)
			}
			continue
		}
		t, err := decodeEntry(raw, name, path, dataStart, dataLen)
		if err != nil {
			return nil, nil, err
		}
		infos = append(infos, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, formatErr(path, "", "header JSON: %v", err)
	}
	if rest := buf[dec.InputOffset():]; len(bytes.TrimRight(rest, " \t\r\n")) != 0 {
		return nil, nil, formatErr(path, "", "header has %d bytes of trailing data after the JSON object", len(rest))
	}
	if err := checkLayout(infos, path, dataStart, dataLen); err != nil {
		return nil, nil, err
	}
	return infos, meta, nil
}

func decodeMetadata(raw json.RawMessage) (map[string]string, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("want an object of string values: %v", err)
	}
	return m, nil
}

func decodeEntry(raw json.RawMessage, name, path string, dataStart, dataLen int64) (TensorInfo, error) {
	// Keys are matched exactly (encoding/json alone would accept "DType"),
	// and nothing else is allowed, as upstream's strict deserializer does.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return TensorInfo{}, formatErr(path, name, "entry is not a JSON object")
	}
	var (
		dtype   string
		shape   []int64
		offsets []int64
	)
	for _, f := range []struct {
		key string
		dst any
	}{{"dtype", &dtype}, {"shape", &shape}, {"data_offsets", &offsets}} {
		v, ok := fields[f.key]
		if !ok {
			return TensorInfo{}, formatErr(path, name, "entry has no %s", f.key)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			var ute *json.UnmarshalTypeError
			if errors.As(err, &ute) {
				return TensorInfo{}, formatErr(path, name, "field %q: want %v, got JSON %s", f.key, ute.Type, ute.Value)
			}
			return TensorInfo{}, formatErr(path, name, "field %q: %v", f.key, err)
		}
		delete(fields, f.key)
	}
	for k := range fields {
		return TensorInfo{}, formatErr(path, name, "entry has unknown field %q", k)
	}
	if len(offsets) != 2 {
		return TensorInfo{}, formatErr(path, name, "data_offsets has %d values, want [begin, end]", len(offsets))
	}
	dt := DType(dtype)
	if dt == "" {
		return TensorInfo{}, formatErr(path, name, "dtype is empty")
	}
	if !dt.Known() {
		return TensorInfo{}, &UnsupportedError{Path: path, Tensor: name, DType: dt,
			Msg: fmt.Sprintf("unknown dtype %q", dt)}
	}
	if shape == nil { // JSON null
		shape = []int64{}
	}
	want, err := byteSize(dt, shape)
	if err != nil {
		return TensorInfo{}, formatErr(path, name, "%v", err)
	}
	begin, end := offsets[0], offsets[1]
	switch {
	case begin < 0 || end < begin:
		return TensorInfo{}, formatErr(path, name, "data_offsets [%d, %d] are not 0 <= begin <= end", begin, end)
	case end > dataLen:
		return TensorInfo{}, formatErr(path, name, "data_offsets [%d, %d] run past the %d-byte data section (truncated file or header lies)", begin, end, dataLen)
	case end-begin != want:
		return TensorInfo{}, formatErr(path, name, "shape %v of %s needs %d bytes but data_offsets [%d, %d] span %d", shape, dt, want, begin, end, end-begin)
	}
	return TensorInfo{Name: name, DType: dt, Shape: shape, File: path, Offset: dataStart + begin, Size: want}, nil
}

// checkLayout sorts infos by offset and enforces the upstream rule that the
// entries tile the data section exactly: no overlap, no hole, no tail.
func checkLayout(infos []TensorInfo, path string, dataStart, dataLen int64) error {
	sort.SliceStable(infos, func(i, j int) bool {
		if infos[i].Offset != infos[j].Offset {
			return infos[i].Offset < infos[j].Offset
		}
		if infos[i].Size != infos[j].Size {
			return infos[i].Size < infos[j].Size
		}
		return infos[i].Name < infos[j].Name
	})
	cursor := dataStart
	prev := ""
	for _, t := range infos {
		switch {
		case t.Offset < cursor:
			return formatErr(path, t.Name, "data_offsets [%d, %d] overlap tensor %q", t.Offset-dataStart, t.Offset-dataStart+t.Size, prev)
		case t.Offset > cursor:
			return formatErr(path, t.Name, "data_offsets begin at %d, leaving a hole after byte %d of the data section", t.Offset-dataStart, cursor-dataStart)
		}
		cursor += t.Size
		if t.Size > 0 {
			prev = t.Name
		}
	}
	if cursor-dataStart != dataLen {
		return formatErr(path, "", "tensors cover %d bytes but the data section has %d (trailing bytes or header lies)", cursor-dataStart, dataLen)
	}
	return nil
}

// readFullAt reads len(buf) bytes at off; a short read is io.ErrUnexpectedEOF.
func readFullAt(r io.ReaderAt, buf []byte, off int64) error {
	n, err := r.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
