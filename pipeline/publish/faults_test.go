package publish

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

const faultRepo = "tester/fraud-9B-GGUF"

// checkInvariant: every commit on main names only stored objects of the
// right size (the fake refuses anything else, so this re-checks the fake),
// and after a successful run main holds exactly the intended bytes.
func checkCommitted(t *testing.T, h *hubtest.Hub, want map[string]string) {
	t.Helper()
	files := h.Files(faultRepo, "main")
	for p, sum := range want {
		if files[p].SHA256 != sum {
			t.Fatalf("%s on main: %+v, want sha256 %s", p, files[p], sum)
		}
		if files[p].LFS && !h.HasObject(sum) {
			t.Fatalf("%s: committed LFS object %s is not stored", p, sum)
		}
	}
}

// TestFaultAtEveryStep injects one fault at each request kind (first and
// last part included) and requires either a verified commit after the
// client's own retries or a clear error with nothing committed — followed,
// then, by a clean re-run that completes.
func TestFaultAtEveryStep(t *testing.T) {
	type tc struct {
		f hubtest.Fault
	}
	var cases []hubtest.Fault
	for _, op := range []hubtest.Op{hubtest.OpCreate, hubtest.OpRevision, hubtest.OpPreupload, hubtest.OpBatch,
		hubtest.OpPutBasic, hubtest.OpPutPart, hubtest.OpComplete, hubtest.OpVerify, hubtest.OpCommit, hubtest.OpTree} {
		for _, k := range []hubtest.FaultKind{hubtest.FaultStatus, hubtest.FaultRateLimit, hubtest.FaultDrop, hubtest.FaultDropAfter, hubtest.FaultHang} {
			parts := []int{0}
			if op == hubtest.OpPutPart {
				parts = []int{1, -1}
			}
			for _, p := range parts {
				cases = append(cases, hubtest.Fault{Op: op, Kind: k, Part: p, RetryAfter: time.Millisecond})
			}
		}
	}
	for _, op := range []hubtest.Op{hubtest.OpPutBasic, hubtest.OpPutPart, hubtest.OpComplete} {
		cases = append(cases, hubtest.Fault{Op: op, Kind: hubtest.FaultExpired})
	}
	cases = append(cases,
		hubtest.Fault{Op: hubtest.OpCommit, Kind: hubtest.FaultStatus, Status: 500, Times: 2},
		hubtest.Fault{Op: hubtest.OpPutPart, Kind: hubtest.FaultStatus, Status: 502, Part: 3, Times: 3},
	)
	for _, f := range cases {
		name := fmt.Sprintf("%s-%s-part%d-x%d", f.Op, f.Kind, f.Part, f.Times)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runFaultCase(t, f, true)
		})
	}
}

// TestPersistentFaultLeavesNothingCommitted makes a step fail every time:
// the run must end in an error with main untouched, and a later clean run
// must finish without re-sending parts the journal recorded.
func TestPersistentFaultLeavesNothingCommitted(t *testing.T) {
	for _, f := range []hubtest.Fault{
		{Op: hubtest.OpPutPart, Kind: hubtest.FaultStatus, Status: 503, Part: -1, Times: -1},
		{Op: hubtest.OpPutPart, Kind: hubtest.FaultDrop, Part: 4, Times: -1},
		{Op: hubtest.OpPutBasic, Kind: hubtest.FaultStatus, Status: 500, Times: -1},
		{Op: hubtest.OpComplete, Kind: hubtest.FaultStatus, Status: 503, Times: -1},
		{Op: hubtest.OpBatch, Kind: hubtest.FaultHang, Times: -1},
		{Op: hubtest.OpCommit, Kind: hubtest.FaultStatus, Status: 503, Times: -1},
		{Op: hubtest.OpCommit, Kind: hubtest.FaultDrop, Times: -1},
		{Op: hubtest.OpCommit, Kind: hubtest.FaultStatus, Status: 400, Times: -1},
		{Op: hubtest.OpPreupload, Kind: hubtest.FaultRateLimit, Times: -1, RetryAfter: time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%s-%s-part%d", f.Op, f.Kind, f.Part), func(t *testing.T) {
			t.Parallel()
			runFaultCase(t, f, false)
		})
	}
}

func runFaultCase(t *testing.T, f hubtest.Fault, expectRecovery bool) {
	h := hubtest.Start(t, smallHub)
	h.CreateRepo(faultRepo, false)
	initial := h.Head(faultRepo, "main")
	dir := t.TempDir()
	big, bigB := writeRandom(t, dir, "fraud-9B-Q4_K_M.gguf", 1<<20+100<<10, 11) // 5 parts
	small, smallB := writeRandom(t, dir, "fraud-9B-Q2_K.gguf", 200<<10, 12)     // basic
	want := map[string]string{"fraud-9B-Q4_K_M.gguf": shaHex(bigB), "fraud-9B-Q2_K.gguf": shaHex(smallB)}
	journal := t.TempDir()
	opts := testOptions(h, journal, File{Local: big}, File{Local: small})
	opts.Card = testCard()
	h.Inject(f)
	res, err := Run(context.Background(), opts, &recorder{})
	if err == nil {
		if !res.Verified || res.CommitOid != h.Head(faultRepo, "main") {
			t.Fatalf("success without a verified commit: %+v", res)
		}
		checkCommitted(t, h, want)
		if got := len(h.Commits(faultRepo, "main")); got != 2 {
			t.Fatalf("%d commits on main, want initial + 1 (no duplicate commit)", got)
		}
		if !expectRecovery {
			t.Fatalf("persistent fault %v did not fail the run", &f)
		}
		return
	}
	// A clear error, nothing committed.
	if expectRecovery && h.PendingFaults() > 0 {
		t.Fatalf("run failed before the fault fired: %v", err)
	}
	var ue *UnverifiedError
	if head := h.Head(faultRepo, "main"); head != initial && !(errors.As(err, &ue) && ue.Commit == head) {
		t.Fatalf("failed run (%v) moved main to %s", err, head)
	}
	if err.Error() == "" {
		t.Fatal("empty error")
	}
	t.Logf("clear error: %v", err)
	// The journal lets a clean re-run skip parts the storage accepted.
	journaled := map[int]bool{}
	jr := openJournal(journalPath(journal, h.URL, faultRepo, "main"), faultRepo, "main")
	for n := range jr.data.Uploads[shaHex(bigB)].Parts {
		journaled[n] = true
	}
	h.ClearFaults()
	h.ResetLog()
	res, err = Run(context.Background(), opts, nil)
	if err != nil {
		t.Fatalf("clean re-run: %v", err)
	}
	checkCommitted(t, h, want)
	for _, n := range h.AcceptedParts(shaHex(bigB)) {
		if journaled[n] {
			t.Fatalf("part %d was journaled as accepted but sent again", n)
		}
	}
}

// TestRandomFaultSchedules throws several random faults at one publish and
// re-runs it (as a user would) until it succeeds: every failed run leaves
// main untouched, the final state is exactly one verified commit, and no
// part the journal recorded is ever sent twice.
func TestRandomFaultSchedules(t *testing.T) {
	ops := []hubtest.Op{hubtest.OpCreate, hubtest.OpRevision, hubtest.OpPreupload, hubtest.OpBatch, hubtest.OpPutBasic,
		hubtest.OpPutPart, hubtest.OpComplete, hubtest.OpVerify, hubtest.OpCommit, hubtest.OpTree}
	kinds := []hubtest.FaultKind{hubtest.FaultStatus, hubtest.FaultRateLimit, hubtest.FaultDrop, hubtest.FaultDropAfter,
		hubtest.FaultHang, hubtest.FaultExpired}
	for seed := uint64(1); seed <= 16; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 99))
			h := hubtest.Start(t, smallHub)
			h.CreateRepo(faultRepo, false)
			initial := h.Head(faultRepo, "main")
			dir := t.TempDir()
			big, bigB := writeRandom(t, dir, "fraud-9B-Q4_K_M.gguf", 1<<20+100<<10, seed)
			small, smallB := writeRandom(t, dir, "fraud-9B-Q2_K.gguf", 200<<10, seed+100)
			for i := 0; i < 3+r.IntN(4); i++ {
				h.Inject(hubtest.Fault{Op: ops[r.IntN(len(ops))], Kind: kinds[r.IntN(len(kinds))],
					Part: []int{0, 1, -1, 3}[r.IntN(4)], Times: 1 + r.IntN(2), Status: []int{500, 502, 503, 504}[r.IntN(4)],
					RetryAfter: time.Millisecond})
			}
			journal := t.TempDir()
			opts := testOptions(h, journal, File{Local: big}, File{Local: small})
			opts.Retry.Attempts = 2 // let faults reach the user, so re-runs are exercised
			var res Result
			var err error
			journaled := map[int]bool{}
			for run := 1; run <= 8; run++ {
				before := len(h.AcceptedParts(shaHex(bigB)))
				res, err = Run(context.Background(), opts, nil)
				for _, n := range h.AcceptedParts(shaHex(bigB))[before:] {
					if journaled[n] {
						t.Fatalf("run %d re-sent journaled part %d", run, n)
					}
				}
				if err == nil {
					break
				}
				var ue *UnverifiedError
				if head := h.Head(faultRepo, "main"); head != initial && !(errors.As(err, &ue) && ue.Commit == head) {
					t.Fatalf("run %d failed (%v) but moved main", run, err)
				}
				jr := openJournal(journalPath(journal, h.URL, faultRepo, "main"), faultRepo, "main")
				journaled = map[int]bool{}
				for n := range jr.data.Uploads[shaHex(bigB)].Parts {
					journaled[n] = true
				}
			}
			if err != nil {
				t.Fatalf("still failing after 8 runs: %v", err)
			}
			if !res.Verified || len(h.Commits(faultRepo, "main")) != 2 {
				t.Fatalf("want one verified commit, got %+v and %d commits", res, len(h.Commits(faultRepo, "main")))
			}
			checkCommitted(t, h, map[string]string{"fraud-9B-Q4_K_M.gguf": shaHex(bigB), "fraud-9B-Q2_K.gguf": shaHex(smallB)})
		})
	}
}
