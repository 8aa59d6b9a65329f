// Package local is the default deployment target: N replicas of `phonellm serve` on this machine, each on its
// own loopback port with a share of the cores and a phone-like memory limit, kept running by a supervisor,
// behind the same [deploy.Fleet] interface as the phone targets.
//
// # Processes
//
// Deploy writes the deployment record (the [deploy.Store] file, with this package's [Extra] holding one
// [Process] per replica: port, threads, command line, PID, start time, restarts, last exit, log file) and
// starts one supervisor process per deployment, `phonellm fleet supervise --state-dir DIR ID`, in its own
// session (setsid), so it outlives the shell and the command that deployed it. Deploy returns once the
// supervisor has recorded itself. The supervisor ([Supervise]):
//
//   - holds an flock on <state>/local/<id>/supervisor.lock, so a deployment never has two supervisors;
//   - starts each replica in its own process group with PR_SET_PDEATHSIG=SIGTERM (from a goroutine locked to
//     its OS thread, since the kernel ties that signal to the forking thread), so replicas die with it;
//   - restarts a replica that exits, after a jittered back-off doubling from 0.5 s to 30 s (reset once a
//     replica ran for a minute), and kills and restarts one that stops answering /health after having been
//     ready;
//   - records every start, exit and health change in the deployment record (written atomically), and on
//     SIGTERM stops the replicas (SIGTERM, SIGKILL after a grace period) and records the deployment stopped.
//
// Status, Endpoints and Stop work from any process that shares the state folder. Status checks each recorded
// PID together with its start time (/proc/<pid>/stat field 22, so a reused PID is never mistaken for a
// replica), the replica's GET /health, and whether the supervisor still runs. Stop sends SIGTERM to the
// supervisor and waits; then, holding the lock, it kills any replica still alive (the case of a supervisor
// that was SIGKILLed) and records the deployment stopped.
//
// Resume starts a fresh supervisor for a deployment whose supervisor is gone (crash, reboot); it kills any
// leftover replica and starts them all again.
//
// This design keeps replicas supervised when nothing else runs (no gateway, no terminal) and keeps a single
// writer per record; the gateway in front only routes.
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
// Secrets: the API key reaches replicas only through the environment (the command line names the variable
// with --api-key-env), and the store refuses to write a record containing its value.
//
// Linux only (procfs, prlimit, PR_SET_PDEATHSIG); elsewhere Deploy and Supervise return an error.
package local
