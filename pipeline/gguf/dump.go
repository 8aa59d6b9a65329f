package gguf

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// Dump writes a stable, readable text form of f: the version, every KV (long arrays summarised by length and
// the sha256 of their encoding), then one line per tensor "name type shape [sha256]". Goldens of GGUF outputs
// compare this text. With withHashes the tensor data is read and hashed.
func Dump(w io.Writer, f *File, withHashes bool) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "gguf v%d kv=%d tensors=%d alignment=%d\n", f.Version, len(f.KVs), len(f.Tensors), f.Alignment)
	for _, kv := range f.KVs {
		fmt.Fprintf(bw, "kv %s %s = %s\n", kv.Key, typeLabel(kv.Value), dumpValue(kv.Value))
	}
	for _, t := range f.Tensors {
		fmt.Fprintf(bw, "tensor %s %s %s", t.Name, t.Type, shapeString(t.Shape))
		if withHashes {
			r, err := f.TensorReader(t.Name)
			if err != nil {
				return err
			}
			h := sha256.New()
			if _, err := io.Copy(h, r); err != nil {
				return fmt.Errorf("gguf: %s: tensor %q: %w", f.Name, t.Name, err)
			}
			fmt.Fprintf(bw, " %s", hex.EncodeToString(h.Sum(nil)))
		}
		bw.WriteString("\n")
	}
	return bw.Flush()
}

func typeLabel(v Value) string {
	if a, ok := v.V.(Array); ok {
		return fmt.Sprintf("array[%s]", a.Elem)
	}
	return v.Type.String()
}

// dumpValue prints short arrays in full and long ones (> 16 elements) as length plus sha256 of the encoding.
func dumpValue(v Value) string {
	a, ok := v.V.(Array)
	if !ok || a.Len() <= 16 {
		if ok {
			return formatValue(v.Type, v.V, 16)
		}
		return v.String()
	}
	h := sha256.New()
	e := encoder{w: h}
	e.value(ValueArray, a)
	return fmt.Sprintf("[%s×%d sha256:%s first: %s]", a.Elem, a.Len(), hex.EncodeToString(h.Sum(nil))[:16],
		strings.TrimSuffix(strings.TrimPrefix(formatValue(ValueArray, a, 4), fmt.Sprintf("[%s×%d: ", a.Elem, a.Len())), "]"))
}

func shapeString(s []uint64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
