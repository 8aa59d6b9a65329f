package quantize

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxNameBytes bounds a model name used in an output file name (file systems allow 255 bytes, and the name
// gets a "-Q4_K_M.gguf" suffix and, while written, a temporary prefix and suffix).
const maxNameBytes = 128

// OutputName reports whether name (a model's general.name, which comes from the file and so from whoever made
// it) can name an output file: a single path element of printable UTF-8, not "." or "..", not hidden, not
// starting with '-', at most 128 bytes. A name such as "../../x" would put the output outside its folder.
func OutputName(name string) bool {
	if name == "" || len(name) > maxNameBytes || !utf8.ValidString(name) || name == "." || name == ".." ||
		strings.HasPrefix(name, ".") || strings.HasPrefix(name, "-") || strings.ContainsAny(name, `/\:`) {
		return false
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
