package tinymodel

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/phonellm/phonellm/internal/fsx"
)

// This is a deliberately small, independent safetensors writer (the
// format's README: u64 header length, JSON header padded with spaces to a
// multiple of 8, data section in header order), kept apart from
// pipeline/safetensors on purpose: the reader's tests use these files as an
// independently written cross-check.

type plannedTensor struct {
	tensorSpec
	dtype string // F32 or BF16
	size  int64
	// values, when set, supplies the whole tensor instead of the random
	// stream (adapters derive some tensors from the base weights).
	values func() ([]float32, error)
}

func elemSize(dtype string) int64 {
	if dtype == BF16 {
		return 2
	}
	return 4
}

// safetensorsHeader returns the encoded header for tensors in order.
func safetensorsHeader(ts []plannedTensor, meta map[string]string) ([]byte, error) {
	var js bytes.Buffer
	js.WriteByte('{')
	m, err := marshal(meta)
	if err != nil {
		return nil, err
	}
	js.WriteString(`"__metadata__":`)
	js.Write(m)
	var off int64
	for _, t := range ts {
		name, err := marshal(t.name)
		if err != nil {
			return nil, err
		}
		shape, err := marshal(t.shape)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&js, `,%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, name, t.dtype, shape, off, off+t.size)
		off += t.size
	}
	js.WriteByte('}')
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	out := make([]byte, 8, 8+js.Len())
	binary.LittleEndian.PutUint64(out, uint64(js.Len()))
	return append(out, js.Bytes()...), nil
}

// chunkElems bounds the values generated and encoded at once.
const chunkElems = 1 << 16

// writeSafetensors streams the tensors of one file, generating each in
// chunks, through a temporary file that is fsynced and renamed into place.
func writeSafetensors(path string, seed uint64, ts []plannedTensor) error {
	header, err := safetensorsHeader(ts, map[string]string{"format": "pt"})
	if err != nil {
		return fmt.Errorf("tinymodel: %s: header: %w", path, err)
	}
	return writeAtomic(path, func(w io.Writer) error {
		if _, err := w.Write(header); err != nil {
			return err
		}
		vals := make([]float32, chunkElems)
		buf := make([]byte, chunkElems*4)
		for _, t := range ts {
			if t.values != nil {
				v, err := t.values()
				if err != nil {
					return err
				}
				if int64(len(v)) != t.numElements() {
					return fmt.Errorf("tensor %q: %d values for shape %v", t.name, len(v), t.shape)
				}
				for len(v) > 0 {
					n := min(len(v), chunkElems)
					if _, err := w.Write(encode(buf, t.dtype, v[:n])); err != nil {
						return err
					}
					v = v[n:]
				}
				continue
			}
			r := streamFor(seed, t.name)
			for off, left := int64(0), t.numElements(); left > 0; {
				n := min(left, chunkElems)
				v := vals[:n]
				t.fill(r, v, off)
				b := encode(buf, t.dtype, v)
				if _, err := w.Write(b); err != nil {
					return err
				}
				left -= n
				off += n
			}
		}
		return nil
	})
}

// encode writes v little-endian as F32 or BF16 (round to nearest even;
// generated values are finite) into buf and returns the used part.
func encode(buf []byte, dtype string, v []float32) []byte {
	if dtype == BF16 {
		for i, x := range v {
			b := math.Float32bits(x)
			binary.LittleEndian.PutUint16(buf[2*i:], uint16((b+0x7FFF+(b>>16)&1)>>16))
		}
		return buf[:2*len(v)]
	}
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return buf[:4*len(v)]
}

// writeAtomic writes a file atomically (package fsx: temporary file in the same folder, buffered, fsynced,
// renamed); the temporary file is removed on error.
func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := fsx.Create(path)
	if err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	defer f.Abort()
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Commit()
	}
	if err != nil {
		return fmt.Errorf("tinymodel: write %s: %w", path, err)
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	return writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
