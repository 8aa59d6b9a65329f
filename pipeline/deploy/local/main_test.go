package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
	"github.com/phonellm/phonellm/runtime/gateway"
)

// The test binary doubles as the replica program and as the supervisor: Options.Command and
// Options.Supervisor re-exec it with one of these first arguments.
const (
	roleReplica    = "phonellm-fake-replica"
	roleSupervisor = "phonellm-fake-supervisor"
	roleGateway    = "phonellm-fake-gateway"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case roleReplica:
			os.Exit(fakeReplica(os.Args[2:]))
		case roleSupervisor:
			os.Exit(fakeSupervisor(os.Args[2:]))
		case roleGateway:
			os.Exit(fakeGateway(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

// fakeReplica is `phonellm serve` with the fake engine: same command line, same HTTP API (runtime/api),
// plus GET /debug/alloc?mb=N, which makes N MiB resident to trip the memory watchdog.
func fakeReplica(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "fake replica: no model")
		return 2
	}
	model := args[0]
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	port := fs.Int("port", 0, "")
	threads := fs.Int("threads", 0, "")
	parallel := fs.Int("parallel", 1, "")
	host := fs.String("host", "", "")
	ctxLen := fs.Int("ctx", 0, "")
	keyEnv := fs.String("api-key-env", "", "")
	alias := fs.String("alias", "tiny", "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if _, err := os.Stat(model); err != nil || *threads < 1 || *host != "127.0.0.1" {
		fmt.Fprintf(os.Stderr, "fake replica: model %q (%v), threads %d, host %q\n", model, err, *threads, *host)
		return 2
	}
	delay, _ := time.ParseDuration(os.Getenv("PHONELLM_FAKE_TOKEN_DELAY"))
	srv := api.New(api.Options{APIKey: os.Getenv(*keyEnv)})
	srv.SetEngine(enginetest.NewFake(enginetest.Options{ID: *alias, Parallel: *parallel, ContextLength: max(*ctxLen, 256), TokenDelay: delay}))
	var hoard [][]byte
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/alloc", func(w http.ResponseWriter, r *http.Request) {
		mb, _ := strconv.Atoi(r.URL.Query().Get("mb"))
		for range mb {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			hoard = append(hoard, b)
		}
		fmt.Fprintf(w, "%d\n", len(hoard))
	})
	mux.Handle("/", srv.Handler())
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake replica:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "fake replica listening on %s\n", ln.Addr())
	return func() int { _ = http.Serve(ln, mux); return 1 }()
}

// fakeSupervisor is `phonellm fleet supervise` with short intervals; PHONELLM_TEST_BACKOFF overrides the
// first restart delay (tests that must observe a process while it is down).
func fakeSupervisor(args []string) int {
	if len(args) != 2 {
		return 2
	}
	o := SuperviseOptions{Store: deploy.NewStore(args[0]), ID: args[1],
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
		HealthInterval: 50 * time.Millisecond, HealthTimeout: time.Second, MemoryInterval: 50 * time.Millisecond,
		BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, StopGrace: 3 * time.Second}
	if d, err := time.ParseDuration(os.Getenv("PHONELLM_TEST_BACKOFF")); err == nil {
		o.BackoffBase, o.BackoffMax = d, d
	}
	if v := os.Getenv(ListenFDEnv); v != "" {
		fd, _ := strconv.Atoi(v)
		ln, err := InheritedListener(fd)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake supervisor:", err)
			return 1
		}
		o.Listener = ln
	}
	err := Supervise(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake supervisor:", err)
		return 1
	}
	return 0
}

// fakeGateway is `phonellm gateway --deployment ID --state-dir DIR --listen-fd 3 --identity X
// [--api-key-env K]`: the real runtime/gateway following the deployment's records, on the inherited socket.
func fakeGateway(args []string) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	id := fs.String("deployment", "", "")
	dir := fs.String("state-dir", "", "")
	fd := fs.Int("listen-fd", 0, "")
	ident := fs.String("identity", "", "")
	keyEnv := fs.String("api-key-env", "", "")
	if err := fs.Parse(args); err != nil || *id == "" || *dir == "" || *fd != ListenFD || *ident == "" {
		fmt.Fprintf(os.Stderr, "fake gateway: bad arguments %q\n", args)
		return 2
	}
	ln, err := InheritedListener(*fd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake gateway:", err)
		return 1
	}
	var keys []string
	if k := os.Getenv(*keyEnv); k != "" {
		keys = append(keys, k)
	}
	g, err := gateway.New(gateway.Options{APIKeys: keys, HealthInterval: 50 * time.Millisecond,
		Header: http.Header{deploy.GatewayIdentityHeader: {*ident}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake gateway:", err)
		return 1
	}
	f, err := New(Options{Store: deploy.NewStore(*dir)})
	if err != nil {
		return 1
	}
	ctx := context.Background()
	go g.Follow(ctx, 50*time.Millisecond, func(ctx context.Context) ([]gateway.Replica, error) {
		eps, err := f.Endpoints(ctx, *id)
		if err != nil {
			return nil, err
		}
		rs := make([]gateway.Replica, len(eps))
		for i, e := range eps {
			rs[i] = gateway.Replica{URL: e.URL, Slots: e.Slots, Name: fmt.Sprintf("replica-%d", e.Replica), APIKey: os.Getenv(e.APIKeyEnv)}
		}
		return rs, nil
	})
	fmt.Fprintf(os.Stderr, "fake gateway on %s\n", ln.Addr())
	if err := g.Serve(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, "fake gateway:", err)
	}
	return 1
}

// testFleet returns a Fleet whose replicas, gateway and supervisor are this test binary.
func testFleet(t *testing.T, dir string) *Fleet {
	t.Helper()
	return testFleetPort(t, dir, 0)
}

// testFleetPort is testFleet with the gateway port Ship uses.
func testFleetPort(t *testing.T, dir string, gatewayPort int) *Fleet {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Options{Store: deploy.NewStore(dir), Cores: 6, GatewayPort: gatewayPort,
		Gateway: func(dir, id string, g GatewayPlan) ([]string, error) {
			argv, err := DefaultGateway(dir, id, g)
			if err != nil {
				return nil, err
			}
			if argv[1] != "gateway" {
				return nil, fmt.Errorf("default gateway command %v", argv)
			}
			argv[0], argv[1] = exe, roleGateway
			return argv, nil
		},
		Command: func(spec deploy.Spec, p Plan) ([]string, error) {
			argv, err := DefaultCommand(spec, p)
			if err != nil {
				return nil, err
			}
			if argv[1] != "serve" {
				return nil, fmt.Errorf("default command %v", argv)
			}
			argv[0], argv[1] = exe, roleReplica
			return argv, nil
		},
		Supervisor: func(dir, id string) ([]string, error) { return []string{exe, roleSupervisor, dir, id}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// testSpec describes n replicas of a small model file.
func testSpec(t *testing.T, n int) deploy.Spec {
	t.Helper()
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	body := []byte("GGUF not really a model")
	if err := os.WriteFile(model, body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	return deploy.Spec{Name: "Tiny Test", Replicas: n, Slots: 2, Ctx: 512,
		Model: deploy.ModelRef{ID: "tiny", Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), Path: model}}
}

// deployT deploys and arranges for the deployment to be stopped when the test ends.
func deployT(t *testing.T, f *Fleet, spec deploy.Spec) deploy.Deployment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := f.Deploy(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(context.Background(), d.ID); err != nil && !errors.Is(err, deploy.ErrNotFound) {
			t.Errorf("cleanup stop: %v", err)
		}
	})
	if _, err := f.WaitReady(ctx, d.ID, 0); err != nil {
		t.Fatalf("%v\nsupervisor log: %s", err, tail(filepath.Join(runDir(f.o.Store, d.ID), "supervisor.log"), 4096))
	}
	return d
}
