package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/fsx"
)

// PlanShards splits tensors, in order, into shards of at most maxShardBytes
// of tensor data each, the way transformers' save_pretrained does: a tensor
// that does not fit starts a new shard, and a tensor larger than the limit
// gets a shard of its own. maxShardBytes <= 0 means one shard.
func PlanShards(tensors []WriteInfo, maxShardBytes int64) [][]WriteInfo {
	if len(tensors) == 0 {
		return nil
	}
	if maxShardBytes <= 0 {
		return [][]WriteInfo{append([]WriteInfo(nil), tensors...)}
	}
	var shards [][]WriteInfo
	var cur []WriteInfo
	var curSize int64
	for _, t := range tensors {
		s := t.Size()
		if len(cur) > 0 && curSize+s > maxShardBytes {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, t)
		curSize += s
	}
	return append(shards, cur)
}

// ShardNames returns the Hugging Face file names for n shards:
// "model.safetensors" for one, else "model-00001-of-0000n.safetensors", ...
func ShardNames(n int) []string {
	if n == 1 {
		return []string{SingleFileName}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
	}
	return names
}

// WriteIndex writes dir/model.safetensors.index.json for the given shards
// (names[i] is the file name of shards[i]) atomically. totalSize is recorded
// as metadata.total_size (the sum of tensor bytes, as transformers writes).
func WriteIndex(dir string, shards [][]WriteInfo, names []string, totalSize int64) error {
	if len(names) != len(shards) {
		return fmt.Errorf("safetensors: index for %s: %d shards but %d names", dir, len(shards), len(names))
	}
	wm := map[string]string{}
	for i, sh := range shards {
		if !filepath.IsLocal(names[i]) {
			return fmt.Errorf("safetensors: index for %s: shard name %q is not a local file name", dir, names[i])
		}
		for _, t := range sh {
			if _, dup := wm[t.Name]; dup {
				return fmt.Errorf("safetensors: index for %s: tensor %q is in two shards", dir, t.Name)
			}
			wm[t.Name] = names[i]
		}
	}
	idx := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": totalSize}, wm}
	data, err := marshalIndent(idx)
	if err != nil {
		return fmt.Errorf("safetensors: index for %s: %w", dir, err)
	}
	path := filepath.Join(dir, IndexFileName)
	if _, err := fsx.WriteFile(path, data); err != nil {
		return fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	return nil
}

func marshalIndent(v any) ([]byte, error) {
	b, err := marshalNoEscape(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
