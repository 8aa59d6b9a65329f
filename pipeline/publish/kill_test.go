package publish

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

// TestMain turns the test binary into the child process of
// TestKilledMidUploadResumesWithoutResendingParts when asked to.
func TestMain(m *testing.M) {
	if os.Getenv("PHONELLM_PUBLISH_CHILD") == "1" {
		opts := Options{Repo: faultRepo, Files: []File{{Local: os.Getenv("PHONELLM_PUBLISH_FILE")}},
			Endpoint: os.Getenv("PHONELLM_PUBLISH_HUB"), Token: hubtest.DefaultToken,
			JournalDir: os.Getenv("PHONELLM_PUBLISH_JOURNAL"), Parallel: 1, RequestTimeout: time.Minute}
		_, err := Run(context.Background(), opts, nil)
		fmt.Fprintf(os.Stderr, "child was not killed while its upload hung (err %v)\n", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func TestKilledMidUploadResumesWithoutResendingParts(t *testing.T) {
	h := hubtest.Start(t, smallHub)
	dir := t.TempDir()
	model, b := writeRandom(t, dir, "fraud-9B-Q4_K_M.gguf", 2<<20+1234, 21) // 9 parts
	oid := shaHex(b)
	journal := t.TempDir()
	// Part 5 hangs: with one part in flight the child has parts 1-4
	// accepted and journaled when it is killed.
	h.Inject(hubtest.Fault{Op: hubtest.OpPutPart, Part: 5, Kind: hubtest.FaultHang})

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PHONELLM_PUBLISH_CHILD=1", "PHONELLM_PUBLISH_FILE="+model,
		"PHONELLM_PUBLISH_HUB="+h.URL, "PHONELLM_PUBLISH_JOURNAL="+journal)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	jpath := journalPath(journal, h.URL, faultRepo, "main")
	deadline := time.Now().Add(60 * time.Second)
	for {
		j := openJournal(jpath, faultRepo, "main")
		if len(j.data.Uploads[oid].Parts) == 4 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child never journaled 4 parts (journal %+v)", j.data.Uploads)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != -1 {
		t.Fatalf("child exited by itself with code %d before the kill", code)
	}
	if got := h.AcceptedParts(oid); len(got) != 4 {
		t.Fatalf("before the kill the storage accepted parts %v, want 1-4", got)
	}
	if h.Head(faultRepo, "main") != h.Commits(faultRepo, "main")[0].Oid || len(h.Commits(faultRepo, "main")) != 1 {
		t.Fatal("killed run committed something")
	}

	h.ResetLog()
	opts := testOptions(h, journal, File{Local: model})
	res, err := Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := h.AcceptedParts(oid)
	slices.Sort(got)
	if !slices.Equal(got, []int{5, 6, 7, 8, 9}) {
		t.Fatalf("re-run sent parts %v, want exactly 5-9", got)
	}
	if res.BytesHashed != 0 {
		t.Fatalf("re-run hashed %d bytes; the journal had the hash", res.BytesHashed)
	}
	if !res.Verified || h.Files(faultRepo, "main")["fraud-9B-Q4_K_M.gguf"].SHA256 != oid {
		t.Fatal("resumed upload not committed and verified")
	}
}
