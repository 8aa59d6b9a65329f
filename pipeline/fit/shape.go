package fit

import (
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// Shape is what the estimate reads from a model: its architecture, metadata and tensor list (no tensor data).
// It comes from a GGUF file ([ShapeOf]) or from a Hugging Face config.json ([ShapeFromConfig]).
type Shape struct {
	Name        string            // file or model name, for messages
	Arch        string            // general.architecture
	KV          map[string]any    // metadata by full key; arrays as typed slices ([]int32, []string, ...)
	Tensors     []plan.TensorDesc // every tensor with its type and ggml shape
	HeaderBytes int64             // bytes of metadata and tensor infos (tokenizer included)
	FileType    gguf.FileType     // general.file_type when known
}

// ShapeOf reads the shape of an opened GGUF file.
func ShapeOf(f *gguf.File) Shape {
	s := Shape{Name: f.Name, Arch: f.Architecture(), KV: make(map[string]any, len(f.KVs)),
		Tensors: make([]plan.TensorDesc, len(f.Tensors)), HeaderBytes: f.DataOffset}
	for _, kv := range f.KVs {
		if a, ok := kv.Value.V.(gguf.Array); ok {
			s.KV[kv.Key] = a.Values
		} else {
			s.KV[kv.Key] = kv.Value.V
		}
	}
	for i, t := range f.Tensors {
		s.Tensors[i] = plan.TensorDesc{Name: t.Name, Type: t.Type, Shape: t.Shape}
	}
	if ft, ok := f.Uint("general.file_type"); ok && ft <= math.MaxUint32 {
		s.FileType = gguf.FileType(ft)
	}
	return s
}

// WeightBytes is the sum of the tensor data sizes (what the runtime maps or loads).
func (s Shape) WeightBytes() (int64, error) {
	var n int64
	for _, t := range s.Tensors {
		b, err := tensorBytes(t)
		if err != nil {
			return 0, err
		}
		if n > math.MaxInt64-b {
			return 0, fmt.Errorf("fit: %s: total tensor size overflows", s.Name)
		}
		n += b
	}
	return n, nil
}

func tensorBytes(t plan.TensorDesc) (int64, error) {
	if len(t.Shape) == 0 {
		return 0, fmt.Errorf("fit: tensor %q has no dimensions", t.Name)
	}
	rows := uint64(1)
	for _, d := range t.Shape[1:] {
		if d != 0 && rows > math.MaxInt64/d {
			return 0, fmt.Errorf("fit: tensor %q: shape %v overflows", t.Name, t.Shape)
		}
		rows *= d
	}
	rb, err := t.Type.RowBytes(int64(min(t.Shape[0], math.MaxInt64/2)))
	if err != nil {
		return 0, fmt.Errorf("fit: tensor %q: %w", t.Name, err)
	}
	if rows != 0 && uint64(rb) > math.MaxInt64/rows {
		return 0, fmt.Errorf("fit: tensor %q: size overflows", t.Name)
	}
	return rb * int64(rows), nil
}

// Quantize returns the shape the model would have after quantizing it to ftype, from the per-tensor type plan of
// package quantize (the same decisions llama-quantize makes), without touching any tensor data. The plan is
// returned too (its OutBytes is the new weight size).
func (s Shape) Quantize(ftype gguf.FileType) (Shape, plan.Plan, error) {
	info, err := plan.ModelInfoFromMetadata(s.Arch, s.KV)
	if err != nil {
		return Shape{}, plan.Plan{}, fmt.Errorf("fit: %s: %w", s.Name, err)
	}
	qp, err := plan.Make(s.Arch, info, s.Tensors, ftype, plan.Overrides{AllowRequantize: true})
	if err != nil {
		return Shape{}, plan.Plan{}, fmt.Errorf("fit: %s: plan %s: %w", s.Name, ftype, err)
	}
	out := s
	out.FileType = ftype
	out.Tensors = make([]plan.TensorDesc, len(qp.Entries))
	for i, e := range qp.Entries {
		out.Tensors[i] = plan.TensorDesc{Name: e.Name, Type: e.To, Shape: e.Shape}
	}
	out.KV = make(map[string]any, len(s.KV)+1)
	for k, v := range s.KV {
		out.KV[k] = v
	}
	out.KV["general.file_type"] = uint32(ftype)
	return out, qp, nil
}

// uintKV reads an integer metadata value (scalar, or the first element of a per-layer array).
func (s Shape) uintKV(suffix string) (uint64, bool) {
	v, ok := s.KV[s.Arch+"."+suffix]
	if !ok {
		return 0, false
	}
	return firstUint(v)
}

// layerKV reads a per-layer integer: element il of an array, or the scalar for every layer.
func (s Shape) layerKV(suffix string, il int) (uint64, bool) {
	v, ok := s.KV[s.Arch+"."+suffix]
	if !ok {
		return 0, false
	}
	r := reflect.ValueOf(v)
	if r.Kind() == reflect.Slice {
		if il >= r.Len() {
			return 0, false
		}
		return firstUint(r.Index(il).Interface())
	}
	return firstUint(v)
}

func (s Shape) isArray(suffix string) bool {
	v, ok := s.KV[s.Arch+"."+suffix]
	return ok && reflect.ValueOf(v).Kind() == reflect.Slice
}

func firstUint(v any) (uint64, bool) {
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if r.Int() < 0 {
			return 0, false
		}
		return uint64(r.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return r.Uint(), true
	case reflect.Float32, reflect.Float64:
		f := r.Float()
		if f < 0 || f != math.Trunc(f) || f > 1<<53 {
			return 0, false
		}
		return uint64(f), true
	case reflect.Slice:
		if r.Len() == 0 {
			return 0, false
		}
		return firstUint(r.Index(0).Interface())
	}
	return 0, false
}

// tensor finds a tensor by name.
func (s Shape) tensor(name string) (plan.TensorDesc, bool) {
	for _, t := range s.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return plan.TensorDesc{}, false
}

// hasBlockTensor reports whether block il has a tensor whose name starts with blk.<il>.<prefix>.
func (s Shape) hasBlockTensor(il int, prefix string) bool {
	p := fmt.Sprintf("blk.%d.%s", il, prefix)
	for _, t := range s.Tensors {
		if strings.HasPrefix(t.Name, p) {
			return true
		}
	}
	return false
}
