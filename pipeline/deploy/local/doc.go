// Package local is the default deployment target: N replicas of `phonellm serve` on this machine, each on its
// own loopback port with a share of the cores and a phone-like memory limit, and a `phonellm gateway` in
// front, all kept running by one supervisor, behind the same [deploy.Fleet] interface as the phone targets.
// [Fleet.Ship] is the target's part of the ship stage (deploy.Run).
//
// # Processes
//
// Deploy writes the deployment record (the [deploy.Store] file, with this package's [Extra] holding one
// [Process] per replica and one for the gateway: port, threads, command line, PID, start time, restarts, last
// exit, log file) and starts one supervisor process per deployment, `phonellm fleet supervise --state-dir DIR
// ID`, in its own session (setsid), so it outlives the shell and the command that deployed it. Deploy returns
// once the supervisor has recorded itself. The supervisor ([Supervise]) treats the replicas and the gateway
// alike — one kind of member, one identity check, one record:
//
//   - it holds an flock on <state>/local/<id>/supervisor.lock, so a deployment never has two supervisors;
//   - it starts each process in its own process group with PR_SET_PDEATHSIG=SIGTERM (from a goroutine locked
//     to its OS thread, since the kernel ties that signal to the forking thread), so they die with it;
//   - it restarts a process that exits, after a jittered back-off doubling from 0.5 s to 30 s (reset once it
//     ran for a minute), and kills and restarts one that stops answering its health check after having been
//     ready: a replica's GET /health must answer 200, the gateway's must carry the deployment's identity;
//   - it records every start, exit and health change in the deployment record (written atomically through
//     internal/fsx), and on SIGTERM stops every process (SIGTERM, SIGKILL after a grace period) and records
//     the deployment stopped.
//
// A process is identified by its PID together with its start time (/proc/<pid>/stat field 22), so a reused
// PID is never mistaken for it. Status, Endpoints and Stop work from any process that shares the state
// folder. Status checks each recorded process, the replicas' /health, the gateway's /health and identity, and
// whether the supervisor still runs; the deployment is ready only when every replica and the gateway are.
// Stop sends SIGTERM to the supervisor and waits; then, holding the lock, it kills any process still alive
// (the case of a supervisor that was SIGKILLed) and records the deployment stopped. Resume starts a fresh
// supervisor for a deployment whose supervisor is gone (crash, reboot).
//
// # The gateway's socket
//
// Deploy binds the gateway's port (127.0.0.1; 0 picks a free one) before it starts anything, so a port in use
// fails the deploy at once ([deploy.PortInUseError]) with nothing started, and passes the bound socket to the
// supervisor (file descriptor 3, [ListenFDEnv]). The supervisor holds it for the deployment's life and hands
// it to every gateway it starts (`phonellm gateway --listen-fd 3`): a restarted gateway serves on the same
// port, connections made meanwhile wait in the socket's backlog, and no other program can take the port.
// Each deployment gets a random identity that its gateway sends in [deploy.GatewayIdentityHeader] on every
// answer; ship and status trust an answer on the gateway's URL only when it carries that identity.
//
// # Resource limits
//
// Threads: each replica gets --threads max(1, cores/replicas) unless the spec sets Threads; nothing pins
// them to cores. Memory (Spec.MemoryLimit, the phone's usable RAM), with no cgroup and no privilege:
//
//   - RSS watchdog: the supervisor reads VmRSS of each replica every 250 ms and SIGKILLs the replica's group
//     when it exceeds the limit, as Android's low-memory killer does; the exit is recorded as
//     "killed: resident memory ... over the ... limit" and the replica restarts with back-off.
//   - RLIMIT_AS = limit + [AddressSpaceSlack] (2 GiB), set before the program runs through util-linux
//     `prlimit --as=N -- CMD` (which execs CMD under the same PID), or with prlimit(2) right after the start
//     when the prlimit command is missing (recorded as "rss-watchdog+rlimit-as-after-start"). It turns a
//     runaway allocation into a failed allocation instead of a machine-wide OOM. The address space counts
//     reservations that never become resident, hence the slack.
//
// Secrets: the API key reaches replicas and the gateway only through the environment (command lines name the
// variable with --api-key-env), and the store refuses to write a record containing its value.
//
// Linux only (procfs, prlimit, PR_SET_PDEATHSIG); elsewhere Deploy and Supervise return an error.
package local
