package tinymodel

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Generate writes the checkpoint described by spec into dir (created if
// needed): weights (model.safetensors, or shards plus
// model.safetensors.index.json when spec.MaxShardBytes > 0), config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json and, for
// Qwen3.5, chat_template.jinja. Every file is written atomically; weights
// are generated and streamed in bounded chunks. Weight files of an earlier
// run in dir are replaced.
func Generate(dir string, spec Spec) error {
	s, err := spec.Normalize()
	if err != nil {
		return err
	}
	tok, err := BuildTokenizer(s)
	if err != nil {
		return err
	}
	if err := checkTokenizer(s, tok); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	if err := removeStaleWeights(dir); err != nil {
		return err
	}
	if err := writeWeights(dir, s); err != nil {
		return err
	}
	files := []struct {
		name   string
		render func(Spec, *Tokenizer) ([]byte, error)
	}{
		{"config.json", configJSON},
		{"generation_config.json", generationConfigJSON},
		{"tokenizer.json", tokenizerJSON},
		{"tokenizer_config.json", tokenizerConfigJSON},
	}
	for _, f := range files {
		data, err := f.render(s, tok)
		if err != nil {
			return fmt.Errorf("tinymodel: render %s: %w", f.name, err)
		}
		if err := writeFileAtomic(filepath.Join(dir, f.name), data); err != nil {
			return err
		}
	}
	if s.isQwen35() {
		if err := writeFileAtomic(filepath.Join(dir, "chat_template.jinja"), []byte(chatTemplate(s))); err != nil {
			return err
		}
	}
	return nil
}

func removeStaleWeights(dir string) error {
	old, err := filepath.Glob(filepath.Join(dir, "model*.safetensors*"))
	if err != nil {
		return fmt.Errorf("tinymodel: %w", err)
	}
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("tinymodel: remove stale %s: %w", p, err)
		}
	}
	return nil
}

// planShards groups tensors, in order, into shards of at most max bytes (a
// larger tensor gets its own shard), as transformers' save_pretrained does.
func planShards(ts []plannedTensor, max int64) [][]plannedTensor {
	if max <= 0 {
		return [][]plannedTensor{ts}
	}
	var shards [][]plannedTensor
	var cur []plannedTensor
	var size int64
	for _, t := range ts {
		if len(cur) > 0 && size+t.size > max {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += t.size
	}
	return append(shards, cur)
}

func writeWeights(dir string, s Spec) error {
	var ts []plannedTensor
	var total int64
	for _, t := range s.tensors() {
		dt := s.tensorDType(t)
		p := plannedTensor{tensorSpec: t, dtype: dt, size: t.numElements() * elemSize(dt)}
		ts = append(ts, p)
		total += p.size
	}
	shards := planShards(ts, s.MaxShardBytes)
	if len(shards) == 1 {
		return writeSafetensors(filepath.Join(dir, "model.safetensors"), s.Seed, shards[0])
	}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := writeSafetensors(filepath.Join(dir, name), s.Seed, sh); err != nil {
			return err
		}
		for _, t := range sh {
			weightMap[t.name] = name
		}
	}
	idx, err := indentJSON(map[string]any{
		"metadata":   map[string]any{"total_size": total},
		"weight_map": weightMap,
	})
	if err != nil {
		return fmt.Errorf("tinymodel: render index: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, "model.safetensors.index.json"), idx)
}

// NumParams returns the number of weight values the checkpoint holds.
func (s Spec) NumParams() (int64, error) {
	n, err := s.Normalize()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range n.tensors() {
		total += t.numElements()
	}
	return total, nil
}

// TensorNames returns the names of the checkpoint's tensors, sorted.
func (s Spec) TensorNames() ([]string, error) {
	n, err := s.Normalize()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range n.tensors() {
		names = append(names, t.name)
	}
	return names, nil
}

// TensorValues returns the values Generate writes for one tensor, rounded to
// the dtype it is stored in (see TensorDType), with its shape; tests use it to check readers and
// converters against the generator without reading the files. It holds the
// whole tensor in memory.
func (s Spec) TensorValues(name string) ([]float32, []int64, error) {
	n, err := s.Normalize()
	if err != nil {
		return nil, nil, err
	}
	for _, t := range n.tensors() {
		if t.name != name {
			continue
		}
		v := n.values(t)
		if n.tensorDType(t) == BF16 {
			buf := make([]byte, 2*len(v))
			encode(buf, BF16, v)
			for i := range v {
				v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(buf[2*i:])) << 16)
			}
		}
		return v, append([]int64(nil), t.shape...), nil
	}
	return nil, nil, fmt.Errorf("tinymodel: spec %q has no tensor %q", n.Name, name)
}

// Qwen3BenchSpec is a Qwen3-0.6B-shaped checkpoint (hidden 1024, 28 layers,
// 16/8 heads, head_dim 128, ffn 3072, vocab 151936, tied embeddings) in
// BF16, about 1.2 GB, for memory and speed benchmarks. Its tokenizer is the
// tiny one, so the vocabulary is mostly padding.
func Qwen3BenchSpec() Spec {
	s, _ := Preset("qwen3")
	s.Name, s.Seed, s.DType = "qwen3-0.6b-shape", 600, BF16
	s.HiddenSize, s.NumLayers, s.NumHeads, s.NumKVHeads, s.HeadDim = 1024, 28, 16, 8, 128
	s.IntermediateSize, s.VocabSize = 3072, 151936
	s.MaxPositionEmbeddings = 40960
	return s
}

// TensorDType returns the dtype a tensor is stored in: the spec's DType,
// except that Qwen3.5 keeps linear_attn.A_log and linear_attn.norm.weight in
// F32 as the released BF16 checkpoints do.
func (s Spec) TensorDType(name string) (string, error) {
	n, err := s.Normalize()
	if err != nil {
		return "", err
	}
	for _, t := range n.tensors() {
		if t.name == name {
			return n.tensorDType(t), nil
		}
	}
	return "", fmt.Errorf("tinymodel: spec %q has no tensor %q", n.Name, name)
}
