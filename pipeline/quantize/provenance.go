package quantize

import (
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Metadata keys of an automatic mix (phonellm quantize auto; llama.cpp ignores them).
const (
	// KeyTensorTypes is the mix as --tensor-type rules (an array of "REGEX=TYPE" strings, first match wins).
	KeyTensorTypes = "phonellm.quantize.tensor_types"
	// KeyTarget says what the mix was chosen for ("size 478000000", "bpw 4.5", "max-kld 0.05", "fit 16gb").
	KeyTarget = "phonellm.quantize.target"
	// KeyPredictedKLD is the mix's predicted mean KLD against the unquantized model.
	KeyPredictedKLD = "phonellm.quantize.predicted_kld"
)

// Provenance is what a quantized GGUF says about how it was made: its file type, the importance matrix
// (llama-quantize's quantize.imatrix.* keys and phonellm's sha256) and an automatic mix.
type Provenance struct {
	FileType string       `json:"file_type,omitempty"`
	Imatrix  *ImatrixInfo `json:"imatrix,omitempty"`
	Mix      *MixInfo     `json:"mix,omitempty"`
}

// ImatrixInfo is the importance matrix a file was quantized with.
type ImatrixInfo struct {
	File    string `json:"file"`
	SHA256  string `json:"sha256,omitempty"`
	Dataset string `json:"dataset,omitempty"`
	Entries int    `json:"entries,omitempty"`
	Chunks  int    `json:"chunks,omitempty"`
}

// MixInfo is the automatic mix a file was made with.
type MixInfo struct {
	Target       string   `json:"target,omitempty"`
	Rules        []string `json:"rules"`
	PredictedKLD float64  `json:"predicted_kld,omitempty"`
}

// ReadProvenance reads a GGUF's provenance keys; absent keys leave their part nil.
func ReadProvenance(f *gguf.File) Provenance {
	var p Provenance
	if ft, ok := f.Uint("general.file_type"); ok {
		p.FileType = gguf.FileType(ft).String()
	}
	if file := f.String(KeyImatrixFile); file != "" {
		im := &ImatrixInfo{File: file, SHA256: f.String(KeyImatrixSHA256), Dataset: f.String(KeyImatrixDataset)}
		if n, ok := f.Uint(KeyImatrixEntries); ok {
			im.Entries = int(min(n, 1<<31-1))
		}
		if n, ok := f.Uint(KeyImatrixChunks); ok {
			im.Chunks = int(min(n, 1<<31-1))
		}
		p.Imatrix = im
	}
	if v, ok := f.KV(KeyTensorTypes); ok {
		if a, ok := v.V.(gguf.Array); ok {
			if rules, ok := a.Values.([]string); ok {
				p.Mix = &MixInfo{Target: f.String(KeyTarget), Rules: append([]string(nil), rules...)}
				if k, ok := f.Float(KeyPredictedKLD); ok {
					p.Mix.PredictedKLD = k
				}
			}
		}
	}
	return p
}
