package imatrix

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// Format is an imatrix file format.
type Format string

// The two formats llama-quantize reads.
const (
	FormatGGUF Format = "gguf" // llama.cpp's current format, written by default
	FormatDat  Format = "dat"  // the legacy format
)

// ParseFormat parses "gguf" or "dat".
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case FormatGGUF, FormatDat:
		return f, nil
	}
	return "", fmt.Errorf("imatrix: unknown format %q (want gguf or dat)", s)
}

// Read reads an imatrix file in either format. A file that starts with the GGUF magic is read as GGUF, anything
// else as the legacy format (llama.cpp tries GGUF first and falls back to the legacy reader).
func Read(path string) (*Matrix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, &FormatError{File: path, Msg: "not a regular file"}
	}
	var magic [4]byte
	n, _ := io.ReadFull(f, magic[:])
	if n == 4 && bytes.Equal(magic[:], []byte(gguf.Magic)) {
		return ReadGGUF(f, st.Size(), path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	return ReadDat(f, st.Size(), path)
}

// WriteFile writes m to path atomically (a temporary file in the same folder, renamed into place) in the given
// format, and returns the artifact with its size and sha256. For the legacy format, the names of the entries it
// leaves out (no token reached them) are returned.
func WriteFile(path string, m *Matrix, format Format) (pipeline.Artifact, []string, error) {
	out, err := fsx.Create(path)
	if err != nil {
		return pipeline.Artifact{}, nil, fmt.Errorf("imatrix: %w", err)
	}
	defer out.Abort()
	var skipped []string
	switch format {
	case FormatGGUF, "":
		err = m.WriteGGUF(out)
	case FormatDat:
		skipped, err = m.WriteDat(out)
	default:
		err = fmt.Errorf("imatrix: unknown format %q", format)
	}
	if err == nil {
		err = out.Commit()
	}
	if err != nil {
		return pipeline.Artifact{}, nil, fmt.Errorf("imatrix: write %s: %w", path, err)
	}
	return pipeline.Artifact{Path: path, Kind: "imatrix", Size: out.Size(), SHA256: out.Sum()}, skipped, nil
}

// FormatOf is the format a file name asks for: the legacy format for a ".dat" extension, GGUF otherwise.
func FormatOf(path string) Format {
	if strings.EqualFold(filepath.Ext(path), ".dat") {
		return FormatDat
	}
	return FormatGGUF
}
