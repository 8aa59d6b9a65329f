package merge

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// File names of a PEFT adapter folder (peft/utils/constants.py CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME).
const (
	AdapterConfigName  = "adapter_config.json"
	AdapterWeightsName = "adapter_model.safetensors"
	adapterPickleName  = "adapter_model.bin"
)

// AdapterRef names an adapter folder and the weight its delta is multiplied by (0 means 1).
type AdapterRef struct {
	Path   string  `json:"path"`
	Weight float64 `json:"weight,omitempty"`
}

// Adapter is an opened PEFT LoRA adapter. Close releases its file.
type Adapter struct {
	Dir    string
	Weight float64 // multiplies every LoRA delta; 1 when opened with 0
	Config *Config
	st     *safetensors.Checkpoint
}

// OpenAdapter opens a PEFT adapter folder: adapter_config.json is parsed and checked, the safetensors header of
// adapter_model.safetensors is read (no tensor data yet). A pickled adapter_model.bin is refused.
func OpenAdapter(dir string, weight float64) (Adapter, error) {
	if weight == 0 {
		weight = 1
	}
	if weight != weight || weight > 1e6 || weight < -1e6 {
		return Adapter{}, formatErr(dir, "adapter weight %v is not a finite number of reasonable size", weight)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return Adapter{}, formatErr(dir, "cannot open adapter: %v", err)
	}
	if !fi.IsDir() {
		if strings.HasSuffix(dir, ".gguf") {
			return Adapter{}, unsupported(dir, "this is a GGUF LoRA; phonellm merges PEFT adapter folders (adapter_config.json + adapter_model.safetensors)")
		}
		return Adapter{}, formatErr(dir, "want a PEFT adapter folder (adapter_config.json + adapter_model.safetensors), got a file")
	}
	cfgPath := filepath.Join(dir, AdapterConfigName)
	data, err := readCapped(cfgPath, maxConfigBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, e := os.Stat(filepath.Join(dir, "adapters.safetensors")); e == nil {
				return Adapter{}, unsupported(dir, "this looks like an MLX-LM adapter (adapters.safetensors); phonellm merges PEFT adapters — convert it with mlx_lm.fuse or export a PEFT adapter")
			}
			return Adapter{}, formatErr(dir, "no %s: not a PEFT adapter folder", AdapterConfigName)
		}
		return Adapter{}, formatErr(dir, "%v", err)
	}
	cfg, err := ParseConfig(dir, data)
	if err != nil {
		return Adapter{}, err
	}
	wPath := filepath.Join(dir, AdapterWeightsName)
	if _, err := os.Stat(wPath); errors.Is(err, fs.ErrNotExist) {
		if _, e := os.Stat(filepath.Join(dir, adapterPickleName)); e == nil {
			return Adapter{}, unsupported(dir, "%s is a pickle file, which phonellm does not load (it can run code); convert it to %s, e.g. in Python: safetensors.torch.save_file(torch.load(%q), %q)", adapterPickleName, AdapterWeightsName, adapterPickleName, AdapterWeightsName)
		}
		return Adapter{}, formatErr(dir, "no %s", AdapterWeightsName)
	}
	st, err := safetensors.OpenFiles(wPath)
	if err != nil {
		return Adapter{}, err
	}
	return Adapter{Dir: dir, Weight: weight, Config: cfg, st: st}, nil
}

// Close releases the adapter's weight file.
func (a Adapter) Close() error {
	if a.st == nil {
		return nil
	}
	return a.st.Close()
}

func readCapped(path string, limit int64) ([]byte, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, formatErr(path, "file is larger than %d bytes", limit)
	}
	return data, nil
}

// peftPrefix is what PEFT's PeftModelForCausalLM puts before the model's own module paths.
const peftPrefix = "base_model.model."

// Roles of adapter tensors (peft/tuners/lora/layer.py parameter names, adapter name removed on save).
type role int

const (
	roleFull role = iota // a whole tensor: modules_to_save, saved biases, saved base layers
	roleA
	roleB
	roleBBias
	roleEmbA
	roleEmbB
	roleMag
)

var roleSuffixes = []struct {
	suffix string
	role   role
}{
	{".lora_A.weight", roleA},
	{".lora_B.weight", roleB},
	{".lora_B.bias", roleBBias},
	{".lora_embedding_A", roleEmbA},
	{".lora_embedding_B", roleEmbB},
	{".lora_magnitude_vector", roleMag},
	{".lora_magnitude_vector.weight", roleMag}, // DoRA state dicts saved before PEFT renamed the key
}

// classify splits an adapter key (without the PEFT prefix) into the module path and the tensor's role. For
// roleFull the "module" is the full tensor path with PEFT's wrapper segments removed. ok is false for a lora_
// key of an unknown form.
func classify(key string) (module string, r role, ok bool) {
	k := strings.ReplaceAll(key, ".default.", ".")
	k = strings.TrimSuffix(k, ".default")
	for _, s := range roleSuffixes {
		if strings.HasSuffix(k, s.suffix) && len(k) > len(s.suffix) {
			return k[:len(k)-len(s.suffix)], s.role, true
		}
	}
	if strings.Contains(k, "lora_") {
		return "", 0, false
	}
	// ModulesToSaveWrapper (older PEFT: "x.modules_to_save.weight") and LoRA-wrapped layers saved whole
	// ("x.base_layer.weight", from bias="all" or save_embedding_layers) name the same tensor as "x.weight".
	k = strings.Replace(k, ".modules_to_save.", ".", 1)
	k = strings.Replace(k, ".base_layer.", ".", 1)
	return k, roleFull, true
}
