package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile builds safetensors bytes from a literal JSON header and a data
// section, without any validation, to forge malformed files.
func rawFile(header string, data []byte) []byte {
	var b bytes.Buffer
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	b.Write(n[:])
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantFormatErr checks that err is a *FormatError naming the path and, when
// tensor is not empty, the tensor, and that its message contains substr.
func wantFormatErr(t *testing.T, err error, path, tensor, substr string) {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("got error %v (%T), want *FormatError", err, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, path) {
		t.Errorf("error %q does not name file %q", msg, path)
	}
	if tensor != "" && (fe.Tensor != tensor || !strings.Contains(msg, `"`+tensor+`"`)) {
		t.Errorf("error %q names tensor %q, want %q", msg, fe.Tensor, tensor)
	}
	if !strings.Contains(msg, substr) {
		t.Errorf("error %q does not contain %q", msg, substr)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q is not one line", msg)
	}
}
