package reference

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestIndependentOfProductionTokenizer keeps this package an independent oracle for internal/tokenizer: it
// may share GPT-2's byte table (internal/tokenizer/bytelevel, a table and nothing else), no code.
func TestIndependentOfProductionTokenizer(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/phonellm/phonellm/internal/tokenizer") && p != "github.com/phonellm/phonellm/internal/tokenizer/bytelevel" {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
