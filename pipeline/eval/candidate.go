package eval

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// CandidateError is a candidate the distribution check refuses: the reference itself (the same file, or a file
// with the same bytes), which would pass any gate with a KL divergence of 0; or, when no candidate was given,
// the absence of a quantized model to pick.
type CandidateError struct {
	Candidate string // "" when none could be picked
	Reason    string
}

func (e *CandidateError) Error() string {
	if e.Candidate == "" {
		return "eval: " + e.Reason
	}
	return fmt.Sprintf("eval: candidate %s: %s", e.Candidate, e.Reason)
}

// InputError classifies a refused candidate as a bad input (exit 3; pipeline/errors.go).
func (e *CandidateError) InputError() bool { return true }

// CheckCandidate refuses a candidate that is the reference: the same path, the same file under another name
// (a link), or a copy with the same sha256 (hashed only when the sizes are equal). Files that cannot be read
// are left to the loader to report.
func CheckCandidate(reference, candidate string) error {
	if reference == candidate {
		return &CandidateError{Candidate: candidate, Reason: "it is the reference itself; a model compared with itself passes any gate (give a quantized candidate)"}
	}
	rs, err1 := os.Stat(reference)
	cs, err2 := os.Stat(candidate)
	if err1 != nil || err2 != nil || rs.IsDir() || cs.IsDir() {
		return nil
	}
	if os.SameFile(rs, cs) {
		return &CandidateError{Candidate: candidate, Reason: fmt.Sprintf("it is the same file as the reference %s; a model compared with itself passes any gate (give a quantized candidate)", reference)}
	}
	if rs.Size() != cs.Size() {
		return nil
	}
	_, rsum, err := fsx.HashFile(reference)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	_, csum, err := fsx.HashFile(candidate)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if rsum == csum {
		return &CandidateError{Candidate: candidate, Reason: fmt.Sprintf("it has the same bytes as the reference %s (sha256 %s); a model compared with itself passes any gate (give a quantized candidate)", reference, rsum[:12])}
	}
	return nil
}

// ModelType reads a GGUF's file type and whether it is quantized: a tensor of a quantized type (block formats
// such as Q4_K, Q8_0) makes it so, whatever general.file_type says.
func ModelType(path string) (ft gguf.FileType, quantized bool, err error) {
	f, err := gguf.OpenFile(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	if v, ok := f.Uint("general.file_type"); ok && v <= 1<<16 {
		ft = gguf.FileType(v)
	}
	for _, t := range f.Tensors {
		if t.Type.Quantized() {
			return ft, true, nil
		}
	}
	return ft, false, nil
}

// PickCandidate returns the first of models (newest first, e.g. a workspace's GGUFs) that can be the candidate
// for reference: quantized, and not the reference itself. skipped says why the others before it were passed
// over. With none, the error is a *CandidateError listing them.
func PickCandidate(reference string, models []string) (pick string, skipped []string, err error) {
	for _, m := range models {
		if _, err := os.Stat(m); errors.Is(err, fs.ErrNotExist) {
			skipped = append(skipped, m+" is gone")
			continue
		}
		if err := CheckCandidate(reference, m); err != nil {
			var ce *CandidateError
			if !errors.As(err, &ce) {
				return "", skipped, err
			}
			skipped = append(skipped, m+" is the reference")
			continue
		}
		ft, q, err := ModelType(m)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s is not a readable GGUF (%v)", m, err))
			continue
		}
		if !q {
			skipped = append(skipped, fmt.Sprintf("%s is %s, not quantized", m, typeName(ft)))
			continue
		}
		return m, skipped, nil
	}
	why := "no quantized model to compare with the reference"
	if len(skipped) > 0 {
		why += " (" + strings.Join(skipped, "; ") + ")"
	}
	return "", skipped, &CandidateError{Reason: why}
}

func typeName(ft gguf.FileType) string {
	if ft == 0 {
		return "F32"
	}
	return ft.String()
}
