package quantize

import (
	"fmt"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/quantize/kquant"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
)

// maxImatrixKV is the longest string llama-quantize stores in quantize.imatrix.file and .dataset: it copies
// them into a 128-byte override value (strncpy(kvo.val_str, …, 127)).
const maxImatrixKV = 127

// ImatrixRequiredError reports a plan with a tensor type that cannot be made without an importance matrix
// (llama-quantize: "this quantization requires an imatrix!"). It is an input error: the importance matrix is
// the missing input.
type ImatrixRequiredError struct {
	FileType gguf.FileType
	Tensor   string
	Type     gguf.Type
}

func (e *ImatrixRequiredError) Error() string {
	return fmt.Sprintf("quantize: %s needs an importance matrix (tensor %q would be %s)", e.FileType, e.Tensor, e.Type)
}

// InputError marks the missing importance matrix as an input problem.
func (e *ImatrixRequiredError) InputError() bool { return true }

// ImatrixMismatchError reports an importance matrix that does not fit the model: a tensor whose entry has the
// wrong number of values (llama-quantize: "imatrix size %d is different from tensor size %d"), or a tensor that
// needs importance data and has none ("Missing importance matrix for tensor %s in a very low-bit
// quantization"). It is an input error.
type ImatrixMismatchError struct {
	File       string
	Tensor     string
	Got, Want  int // values in the entry and values the tensor needs; Got 0 when the entry is missing
	NeededType gguf.Type
}

func (e *ImatrixMismatchError) Error() string {
	if e.Got == 0 {
		return fmt.Sprintf("quantize: %s has no importance data for tensor %q, which %s cannot be made without; is it the imatrix of another model?",
			e.File, e.Tensor, e.NeededType)
	}
	return fmt.Sprintf("quantize: %s has %d importance values for tensor %q, which needs %d; is it the imatrix of another model?",
		e.File, e.Got, e.Tensor, e.Want)
}

// InputError marks the mismatch as an input problem.
func (e *ImatrixMismatchError) InputError() bool { return true }

// imatrixLen is the number of importance values a tensor takes: its row length times its experts
// (ne[0]·ne[2], what llama-quantize compares the entry's size with).
func imatrixLen(e *plan.Entry) int64 {
	n := int64(e.Shape[0])
	if len(e.Shape) > 2 {
		n *= int64(e.Shape[2])
	}
	return n
}

// checkImatrix matches the importance matrix against the plan before anything is written, as llama-quantize
// does tensor by tensor: an entry of the wrong size is an error (a warning for token_embd, which is then
// quantized without one), a missing entry a warning, or an error where the type needs one.
func checkImatrix(qp plan.Plan, im *imatrix.Importance, name string, rep pipeline.Reporter) (*ImatrixUse, error) {
	if name == "" {
		name = im.File
	}
	u := &ImatrixUse{File: truncate(name, maxImatrixKV), SHA256: im.SHA256, Entries: im.Len(), Chunks: im.Chunks}
	if len(im.Datasets) > 0 {
		u.Dataset = truncate(im.Datasets[0], maxImatrixKV)
	}
	for i := range qp.Entries {
		e := &qp.Entries[i]
		if !e.Convert() {
			continue
		}
		n, ok := im.Size(e.Name)
		want := imatrixLen(e)
		switch {
		case !ok && e.NeedsImatrix:
			return nil, &ImatrixMismatchError{File: im.File, Tensor: e.Name, NeededType: e.To}
		case !ok:
			u.Missing = append(u.Missing, e.Name)
		case int64(n) != want && e.Name == "token_embd.weight":
			rep.Note(pipeline.Warn, fmt.Sprintf("%s: %d importance values for token_embd.weight, which has %d; quantized without them", im.File, n, want))
			u.Missing = append(u.Missing, e.Name)
		case int64(n) != want:
			return nil, &ImatrixMismatchError{File: im.File, Tensor: e.Name, Got: n, Want: int(want)}
		default:
			u.Used++
		}
	}
	// The embedding and the output head have no entry in a usual importance matrix (llama-imatrix collects
	// only blk.* products unless --process-output): no warning for them.
	var unexpected []string
	for _, n := range u.Missing {
		if n != "token_embd.weight" && n != "output.weight" {
			unexpected = append(unexpected, n)
		}
	}
	if len(unexpected) > 0 {
		rep.Note(pipeline.Warn, fmt.Sprintf("%s has no importance data for %d of %d quantized tensors (%s); they are quantized without",
			im.File, len(unexpected), len(u.Missing)+u.Used, strings.Join(unexpected[:min(3, len(unexpected))], ", ")))
	}
	return u, nil
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// encodeRows encodes j's rows (in src) into dst, rb bytes per row: with the tensor's importance values, every
// expert's rows with that expert's slice of them (llama-quantize quantizes 3-D tensors expert by expert).
func encodeRows(dst []byte, src []float32, j job, rb int64) error {
	e := j.entry
	if j.imatrix == nil || !e.To.Quantized() {
		enc, err := rowEncoder(e.To)
		if err != nil {
			return err
		}
		enc(dst, src)
		return nil
	}
	f, err := kernelFormat(e.To)
	if err != nil {
		return err
	}
	ne0 := int64(e.Shape[0])
	perExpert := int64(1)
	if len(e.Shape) > 1 {
		perExpert = int64(e.Shape[1])
	}
	for r := int64(0); r < j.n; {
		row := j.row0 + r
		ex := row / perExpert
		n := min(j.n-r, (ex+1)*perExpert-row) // rows left in this expert
		f.QuantizeWeighted(dst[r*rb:(r+n)*rb], src[r*ne0:(r+n)*ne0], j.imatrix[ex*ne0:(ex+1)*ne0])
		r += n
	}
	return nil
}

// checkKernelNeeds refuses a plan that gives a tensor a type ggml cannot quantize without importance values
// (ggml_quantize_requires_imatrix: IQ2_XXS, IQ2_XS, IQ1_S, where ggml would abort) when that tensor has none:
// a --token-embedding-type or --output-tensor-type of those types, which tensor_requires_imatrix does not
// cover, or any tensor when there is no importance matrix at all.
func checkKernelNeeds(qp plan.Plan, im *imatrix.Importance, fileType gguf.FileType) error {
	for i := range qp.Entries {
		e := &qp.Entries[i]
		if !e.Convert() || !kquant.RequiresImatrix(uint32(e.To)) {
			continue
		}
		if im == nil {
			return &ImatrixRequiredError{FileType: fileType, Tensor: e.Name, Type: e.To}
		}
		if n, ok := im.Size(e.Name); !ok || int64(n) != imatrixLen(e) {
			return &ImatrixMismatchError{File: im.File, Tensor: e.Name, NeededType: e.To}
		}
	}
	return nil
}
