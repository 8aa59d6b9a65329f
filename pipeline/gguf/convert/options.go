package convert

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// OutType is the --outtype of a conversion: "f32", "f16", "bf16", or "auto" (the zero value), which picks
// BF16 when the first 2-D+ bf16/f16 tensor of the checkpoint is bf16 and F16 otherwise, as upstream's
// default LlamaFileType.GUESSED does (it looks at the tensors, not at config.json's torch_dtype, because
// fine-tunes misreport it).
type OutType string

// Output types.
const (
	OutAuto OutType = "auto"
	OutF32  OutType = "f32"
	OutF16  OutType = "f16"
	OutBF16 OutType = "bf16"
)

// ParseOutType parses an --outtype value case-insensitively; "" means auto.
func ParseOutType(s string) (OutType, error) {
	switch t := OutType(strings.ToLower(strings.TrimSpace(s))); t {
	case "", OutAuto:
		return OutAuto, nil
	case OutF32, OutF16, OutBF16:
		return t, nil
	}
	return "", fmt.Errorf("convert: unknown output type %q (valid: f32, f16, bf16, auto)", s)
}

// Type is the ggml type of the large tensors in a file of this output type (F16 for auto).
func (t OutType) Type() gguf.Type {
	switch t {
	case OutF32:
		return gguf.TypeF32
	case OutBF16:
		return gguf.TypeBF16
	}
	return gguf.TypeF16
}

// FileType is the general.file_type value: ALL_F32 (0), MOSTLY_F16 (1) or MOSTLY_BF16 (32).
func (t OutType) FileType() gguf.FileType {
	switch t {
	case OutF32:
		return gguf.FileTypeAllF32
	case OutBF16:
		return gguf.FileTypeBF16
	}
	return gguf.FileTypeF16
}

// Options configure a conversion. The zero value of every field but Model is usable.
type Options struct {
	// Model is the Hugging Face checkpoint directory (config.json, tokenizer files, safetensors).
	Model string `json:"model"`
	// OutType is the output type; "" or "auto" guesses from the checkpoint's tensors.
	OutType OutType `json:"outtype,omitempty"`
	// Out is the output file. Empty: <Model>/<Name>-<TYPE>.gguf. An existing directory: that name inside it.
	Out string `json:"out,omitempty"`
	// KeepMTP keeps the Qwen3.5 multi-token-prediction block as upstream writes it by default (block_count
	// = num_hidden_layers + mtp_num_hidden_layers, nextn_predict_layers, blk.N.nextn.* tensors). Phone
	// runtimes older than llama.cpp b9180 cannot load such files, so it is off by default.
	KeepMTP bool `json:"keep_mtp,omitempty"`
	// Source, when set, replaces the checkpoint's safetensors as the source of tensor data (the LoRA fused
	// path passes a merging source). Names and shapes must be those of the checkpoint.
	Source pipeline.TensorSource `json:"-"`
	// partial plans a deliberately incomplete model without validating it (package tests of single transforms
	// use checkpoints of a few tensors); every real conversion is validated.
	partial bool
	// Name is general.name; empty means the base name of Model.
	Name string `json:"name,omitempty"`
	// BlockElems is the number of values converted per row block; 0 means DefaultBlockElems. The output does
	// not depend on it (tests set 1).
	BlockElems int64 `json:"-"`
}

// Validate checks the options without touching the checkpoint's tensors.
func (o Options) Validate() error {
	if o.Model == "" {
		return errors.New("convert: no model directory given")
	}
	st, err := os.Stat(o.Model)
	if err != nil {
		return fmt.Errorf("convert: model directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("convert: model %s is not a directory", o.Model)
	}
	if _, err := ParseOutType(string(o.OutType)); err != nil {
		return err
	}
	return nil
}

func (o Options) name() string {
	if o.Name != "" {
		return o.Name
	}
	return filepath.Base(filepath.Clean(o.Model))
}

// outPath resolves the output file for a resolved output type.
func (o Options) outPath(t OutType) string {
	file := fmt.Sprintf("%s-%s.gguf", o.name(), strings.ToUpper(string(t)))
	if o.Out == "" {
		return filepath.Join(o.Model, file)
	}
	if st, err := os.Stat(o.Out); err == nil && st.IsDir() {
		return filepath.Join(o.Out, file)
	}
	return o.Out
}

// Result describes a finished conversion.
type Result struct {
	Arch      string              `json:"arch"`            // GGUF architecture, e.g. "qwen35"
	HFArch    string              `json:"hf_architecture"` // config.json architectures[0]
	OutType   OutType             `json:"outtype"`         // resolved output type
	Tensors   int                 `json:"tensors"`
	Params    int64               `json:"params"`      // elements in the written tensors
	Blocks    int                 `json:"block_count"` // written block_count
	MTP       bool                `json:"mtp"`         // the MTP block was kept
	Dropped   int                 `json:"dropped_tensors"`
	Artifacts []pipeline.Artifact `json:"artifacts"`
}
