package tokenizer_test

import (
	"fmt"
	"os"
	"testing"
)

// tempDir holds what the tests of this binary share (the tiny models of tinyPairs).
var tempDir string

func TestMain(m *testing.M) {
	var err error
	if tempDir, err = os.MkdirTemp("", "tokenizer-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tempDir)
	os.Exit(code)
}
