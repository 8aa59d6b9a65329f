package plan

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// ModelInfoFromMetadata reads ModelInfo from GGUF metadata values keyed by full name ("qwen3.block_count"), the
// way llama_model::load_hparams does: block_count required; head_count optional (0); head_count_kv defaults to
// head_count; expert_count optional (0). Per-layer arrays contribute their first element. Values may be any Go
// integer type, integral float64 (as decoded from JSON), or slices of those.
func ModelInfoFromMetadata(arch string, kv map[string]any) (ModelInfo, error) {
	var m ModelInfo
	get := func(suffix string, dst *int, required bool) (bool, error) {
		key := arch + "." + suffix
		v, ok := kv[key]
		if !ok {
			if required {
				return false, fmt.Errorf("quantize: metadata key %s is missing", key)
			}
			return false, nil
		}
		n, err := firstInt(v)
		if err != nil {
			return false, fmt.Errorf("quantize: metadata key %s: %w", key, err)
		}
		if n < 0 || n > math.MaxInt32 {
			return false, fmt.Errorf("quantize: metadata key %s: value %d out of range", key, n)
		}
		*dst = int(n)
		return true, nil
	}
	if _, err := get("block_count", &m.BlockCount, true); err != nil {
		return ModelInfo{}, err
	}
	if _, err := get("attention.head_count", &m.HeadCount, false); err != nil {
		return ModelInfo{}, err
	}
	found, err := get("attention.head_count_kv", &m.HeadCountKV, false)
	if err != nil {
		return ModelInfo{}, err
	}
	if !found {
		m.HeadCountKV = m.HeadCount
	}
	if _, err := get("expert_count", &m.ExpertCount, false); err != nil {
		return ModelInfo{}, err
	}
	return m, nil
}

// firstInt converts a metadata value (any integer kind, an integral float, or a slice of those) to int64.
func firstInt(v any) (int64, error) {
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return r.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if r.Uint() > math.MaxInt64 {
			return 0, fmt.Errorf("value %d out of range", r.Uint())
		}
		return int64(r.Uint()), nil
	case reflect.Float32, reflect.Float64:
		if f := r.Float(); f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return int64(f), nil
		}
		return 0, fmt.Errorf("value %v is not an integer", v)
	case reflect.Slice, reflect.Array:
		if r.Len() == 0 {
			return 0, errors.New("empty array")
		}
		return firstInt(r.Index(0).Interface())
	}
	return 0, fmt.Errorf("value of type %T is not an integer", v)
}

// Text renders the plan as one line per tensor (name, from -> to, shape, bytes, fallback or note) and a total
// line; it is the format of the package's plan goldens and of a dry run.
func (p Plan) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "file_type %s (%d)\nquantization_version %d\n", p.FileType, FileTypeValue(p.FileType),
		QuantizationVersion)
	for _, e := range p.Entries {
		fmt.Fprintf(&b, "%s %s -> %s %v %d", e.Name, e.From, e.To, e.Shape, e.Bytes)
		if e.Fallback != "" {
			fmt.Fprintf(&b, " fallback: %s", e.Fallback)
		}
		if e.Note != "" {
			fmt.Fprintf(&b, " (%s)", e.Note)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "total %d tensors, %d converted, %d fallback; %d -> %d bytes, %.4f bpw\n", len(p.Entries),
		p.Converted, p.NFallback, p.InBytes, p.OutBytes, p.BitsPerWeight())
	return b.String()
}
