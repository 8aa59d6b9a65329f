package main

import (
	"os"
	"testing"
)

// cliSelfEnv makes the test binary run as phonellm itself. The local fleet starts its supervisor, replicas
// and gateway from os.Executable() — this binary, in tests — with phonellm command lines, so tests that ship
// set it (t.Setenv) and the children inherit it.
const cliSelfEnv = "PHONELLM_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(cliSelfEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}
