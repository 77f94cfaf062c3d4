// Package sandbox is the "sandbox" worker module: isolated command
// execution for agent tools. Each session may have one sandbox on one
// node: a private working directory (the only place its commands can
// write) and resource limits; commands run in it under bubblewrap.
//
// # Functions
//
//	sandbox::create  {session_id, network?, limits?}  → Sandbox                    (idempotent)
//	sandbox::exec    {sandbox_id, command|argv, stdin?, env?, timeout_ms?} → Result
//	shell::exec      {command|argv, stdin?, env?, timeout_ms?} → Result           (the caller's session)
//	sandbox::destroy {sandbox_id} | {session_id} → {destroyed}                     (idempotent)
//	sandbox::list    {session_id?, after?} → {sandboxes, truncated?}               (idempotent)
//
// create returns the session's live sandbox when it has one (so
// provisioning may retry after a crash); its limits and network stay as
// they were. A [Sandbox] names its node, workdir, isolation ("bwrap", or
// "none" where allowed), network, effective [Limits] and what enforces
// them (Enforced). shell::exec takes the session from the call's baggage
// (engine.SessionFromContext), never from its arguments, which a model
// writes; no session or no sandbox is not_found ("no sandbox for session
// X: start the run with sandbox:true"). An exec is `/bin/sh -c command`
// or argv as is; env adds variables to PATH, HOME (the workdir), TMPDIR
// (/tmp) and LANG (C.UTF-8), and may override them. A [Result] carries
// the exit code (128+N for a command killed by signal N), stdout and
// stderr capped at 64 KiB each (the rest is read and discarded:
// truncated, with the full byte counts; never cut inside a rune, and cut
// further when the answer, in the caller's codec, would not fit the
// server's max payload: a JSON caller gets each control character and
// each byte that is not UTF-8 as a six-byte escape), timed_out, oom_killed,
// over_quota, cleanup_only, quota_stopped (see Limits), the duration and
// the isolation. Every function answers bad
// input with invalid_payload and never leaves half-made state.
// list pages by session id: an answer cut to the server's max payload in
// the caller's codec says truncated, and after (the last session_id)
// continues it. The fs tools' answers fit it too (fstool.WithMaxPayload).
// [Worker.Workdir] gives in-process tools (fs::*) the same workdir, so
// paths agree between shell::exec and them; [Worker.CallerWorkdir] takes
// the session from the call.
//
// # Isolation
//
// Every exec runs, through a small /bin/sh shim (below), as
//
//	bwrap --unshare-all [--share-net] --unshare-user --disable-userns
//	      --die-with-parent --new-session --uid 1000 --gid 1000
//	      --hostname sandbox --cap-drop ALL
//	      --clearenv --setenv PATH … --setenv HOME <workdir> --setenv TMPDIR /tmp --setenv LANG C.UTF-8 [--setenv K V]…
//	      --ro-bind /usr /usr  --symlink usr/bin /bin  --symlink usr/sbin /sbin
//	      --symlink usr/lib /lib  --symlink usr/lib64 /lib64          (as the host has them)
//	      --ro-bind-try /etc/{passwd,group,hosts,resolv.conf,nsswitch.conf,ssl/certs,alternatives,ld.so.cache} (same path)
//	      --proc /proc --remount-ro /proc
//	      --dev /dev --size <memory> --tmpfs /dev/shm --remount-ro /dev
//	      --size <memory> --tmpfs /tmp
//	      --bind <workdir> <workdir> --remount-ro / --chdir <workdir>
//	      -- <command>
//
// New user, mount, pid, ipc, uts, cgroup and (unless network) net
// namespaces; an unprivileged uid and gid with no capabilities and no
// nested user namespaces; a fresh, read-only root that holds only the
// system's program and library folders (read-only), a few /etc files
// (read-only), a private read-only /proc, a private /dev (read-only but
// for its devices and /dev/shm), a private /tmp (emptied after every
// exec; /tmp and /dev/shm are sized and charged as memory), and the
// sandbox's workdir — at its own host path, writable, the working
// directory. Nothing else exists inside: not the node's home (where the
// credential vault lives), /root, /home, other sandboxes' workdirs.
// Without network the sandbox has an empty network namespace: even the
// host's 127.0.0.1 is unreachable. The host's environment never reaches a
// command. Background processes do not outlive their exec: the pid
// namespace dies with its init when the command returns.
//
// Who the sandbox's user is on the host matters for every permission
// check the kernel makes by uid (not by capability). A node running as
// root runs bubblewrap as an unprivileged host user (setting host_uid,
// default 65534 "nobody"; [WithHostUser]): bubblewrap maps the sandbox's
// uid 1000 to it, and it owns the sandbox's files ([Worker.FileOwner]):
// the fs tools give it what they create and keep a replaced file's
// owner, and files written into a workdir as root otherwise are given
// to it before the next exec. That needs unprivileged user namespaces and a
// root folder that user can reach: the root is then mode 0711 (search,
// no listing; workdirs 0700 with unguessable names), and every parent of
// it must be searchable (o+x). Where that does not work the node logs a
// warning and runs bubblewrap as root (also with host_uid=0): the
// sandbox's user is then root on the host for file permission checks, so
// /proc is read-only (as always) — its root-owned files, /proc/sys
// among them, would otherwise be writable (core_pattern runs a program
// as root). A node not running as root runs bubblewrap as its own user.
//
// At Start the worker runs `true` in a sandbox built the same way. If
// bubblewrap is missing (setting bwrap, default /usr/bin/bwrap; Debian
// package bubblewrap) or fails (as the host user and as root), the node
// logs why (Warn) and refuses create and exec with unavailable, saying
// why and naming the setting allow_unsandboxed; with
// allow_unsandboxed=true it runs commands with os/exec in the workdir
// instead (as the node's user, every limit below but the namespaces
// still applied) and every result says isolation "none". A sandbox created isolated never runs unisolated: on a node
// that lost bubblewrap its execs are unavailable.
//
// # Limits
//
// Per sandbox, shared by its execs ([Limits]; defaults [DefaultLimits],
// maxima [MaxLimits], both settable; a create's out-of-range limit is
// invalid_payload):
//
//   - pids: cgroup pids.max over all the sandbox's tasks (threads count,
//     and so do bubblewrap's own two). A fork bomb stops there.
//   - memory_mb: cgroup memory limit (v1 memory.limit_in_bytes and
//     memsw; v2 memory.max, memory.swap.max 0), /tmp included. Without a
//     writable memory cgroup: RLIMIT_AS per process ("rlimit:as"; some
//     runtimes that reserve address space, like V8, then fail).
//   - cpu_seconds: RLIMIT_CPU of every process of an exec (SIGXCPU at the
//     limit, SIGKILL a second later); it bounds each process, not their
//     sum — the wall clock bounds the exec.
//   - disk_mb: RLIMIT_FSIZE (no file grows past it: SIGXFSZ), and the
//     workdir's usage (allocated blocks) is measured while an exec runs
//     (every 500 ms, or twenty times as long as a measurement takes,
//     whichever is longer) and after it. An exec running when the
//     workdir passes the quota is stopped (SIGKILL; the result says
//     quota_stopped and over_quota). Over the quota the next exec is
//     not refused — it is how the model frees space (rm) — but runs
//     cleanup-only (cleanup_only in its result): RLIMIT_FSIZE 0, so no
//     file grows (a writer, in /tmp too, gets SIGXFSZ), while removing,
//     truncating, moving and reading files work. Each such exec
//     measures again first, so space freed by fs::write, from the host
//     or by the last exec ends it; adopting a sandbox after a restart
//     measures it too. fs::write and fs::edit measure the workdir
//     before a write that grows it and refuse one that would pass the
//     quota with forbidden (ErrDiskQuota, details used_bytes,
//     limit_bytes and write_bytes), writing nothing; writes that shrink
//     it always go through. The quota is not a file system's: between measurements a
//     command may pass it by what it writes in that time (a cleanup-only
//     one only by directories and blocks allocated past a file's end),
//     and empty files, which take no blocks, do not count.
//   - wall_ms: the timeout of an exec; timeout_ms may shorten it (a
//     longer one is invalid_payload), and a caller's shorter deadline
//     wins (minus a margin to answer). At the timeout every process of
//     the exec gets SIGTERM, then after kill_grace (default 500 ms)
//     SIGKILL; the result says timed_out and which signal ended it.
//
// The process the worker starts is a /bin/sh shim (its script is a
// constant; limits and cgroup files are its positional parameters, the
// command follows "--" and is only ever "$@"): it joins the exec's
// cgroups (v1: writes its pid to cgroup.procs; on v2 the process is born
// in its cgroup through clone3 CLONE_INTO_CGROUP), sets RLIMIT_CORE 0,
// RLIMIT_CPU, RLIMIT_FSIZE (and RLIMIT_AS), then execs bwrap: nothing
// of the exec runs before it is accounted. RLIMIT_NPROC is not used: as
// root it counts every process of uid 0.
//
// Cgroups: v2 where /sys/fs/cgroup/cgroup.controllers exists (setting
// cgroup_root), else the v1 hierarchies pids/ and memory/ under it. The
// node gets a group named after its root folder (iii-sandbox-<hash>), a
// sandbox a cgroup in it holding its limits, an exec a leaf below that
// holding its processes; leaves are removed after their exec. Where no
// cgroup is writable, rlimits alone stand in, and Enforced says so. On
// v2 without the pids or memory controller the leaves still track (and
// kill) every process.
//
// Killing an exec (timeout, destroy, shutdown) signals every process of
// its leaf cgroup and every descendant of the started process (found in
// /proc), each pinned by a pidfd and checked by start time so a reused
// pid is never hit; bubblewrap itself last, once the sandbox's init is
// gone, so it reaps it and no zombie is left to the host's pid 1. The
// worker always waits for the process.
//
// # Records, nodes, crashes
//
// Records live in the KV bucket [SandboxesBucket] under
// "session.<session id>" (JSON, readable with `nats kv get`): sandbox_id,
// session_id, node, workdir, isolation, network, limits, enforced,
// created_at, last_used_at (Unix ms; written at most about once a
// minute), expires_at (created_at plus the holding node's max_age).
// create is a KV Create, so racing creates of one session agree on the
// winner. A sandbox id is "<session id>_<10 characters>": it names
// its record, and a destroyed sandbox's id never names its successor.
//
// A session homed in a region ("<region>.<name>", subjects.ValidateSessionID)
// keeps its dot in the sandbox id ("eu.s1_k3v9x0q2ab"). That is safe
// everywhere the id is used: a workdir and cgroup folder name (one dot,
// never first, never "." or ".."; the "_<10 characters>" suffix keeps it
// from ever naming a cgroup interface file such as "memory.max"), and the
// record key "session.eu.s1" (KV keys may hold dots; listings take the
// whole rest after "session."). No subject carries a sandbox id, so no
// escaping is needed. The records bucket stays one bucket for every
// region: sandboxes are node-local, and a record only says which node
// holds one.
//
// Sandboxes are node-local: only the node that created one (setting
// node, default the host name) runs commands in it or destroys it. A call
// that reaches another node's sandbox worker answers unavailable
// ("sandbox X lives on node Y"); list shows every node's. Workdirs live in
// the node's root (setting root, default <home>/sandboxes, mode 0700),
// one folder per sandbox id (0700). Removing a workdir (destroy, the
// reaper) first gives its directories their owner's permissions back
// when a command took them away (chmod 0555, 0000): a node that is not
// root could not empty them otherwise. A root node whose home the sandbox's
// host user cannot pass through uses /var/lib/iii/sandboxes/<hash of the
// home> ([SystemRoot]) instead. A node removes its root at Close when it
// holds no workdir (a symbolic link stays); a root removed under a
// running node is made again by its next sandbox.
//
// # Gone nodes
//
// A node that never comes back (a container restarted under a new host
// name) would leave its sessions' records, and with them those sessions,
// stuck: every call answering unavailable, no new sandbox possible. So
// every node writes a heartbeat into the same bucket, under
// "node.<node>" ("node.=<hex of the name>" for a name that is no KV key):
// {node, at, started_at}, at Start before it adopts anything and then
// every fifth of orphan_after (setting, default 5m, at least 1s; a
// failed write is logged and retried). The bucket is the existing one,
// with no per-key TTL (an existing bucket keeps its configuration), so
// the heartbeat carries its time. A record of another node is an orphan
// when
//
//   - its node's last heartbeat (the later of the time it wrote in it and
//     the server's time of the write, so a live node with a late clock
//     still looks alive) is older than orphan_after; or
//   - now is past its expires_at by more than orphan_after (its node, were
//     it alive, would have reaped it; a record without expires_at, from
//     an older version, takes created_at plus this node's max_age); or
//   - its node never wrote a heartbeat (an older version, or a heartbeat
//     removed as below) and it was not used for idle_ttl plus
//     orphan_after.
//
// For an orphan, exec and shell::exec (and [Worker.Workdir]) answer
// not_found wrapping [ErrNoSandbox] and [ErrOrphan] ("no sandbox X: it
// was on node Y, gone since T: no heartbeat for D, …; sandbox::create
// gives the session a new one"); destroy deletes the record and answers
// destroyed; create deletes the record and makes a sandbox on its own
// node; and every node's reaper deletes the orphans it finds, and the
// heartbeats of nodes silent for orphan_after that no record names any
// more. Each delete is revision-checked (compare-and-set): of two nodes
// racing to replace one orphan one deletes it, and the KV Create after
// picks one new sandbox for both.
//
// A live node never loses a sandbox this way as long as orphan_after
// exceeds the clock difference between nodes and the longest pause a
// live node may take (a NATS outage, a stopped process): its heartbeat
// stays fresh. A node that comes back is not harmed either: its
// heartbeat goes first, and adopting a record claims it with a
// revision-checked rewrite (which also writes its expires_at from this
// node's max_age), so a takeover that read the record before fails and
// reads it again, and a record taken over before is not adopted; the
// reaper then removes its old workdir (no record names it). A live
// sandbox whose record was taken over anyway (the node paused longer than
// orphan_after) is dropped by the node's next reaper run: its processes
// killed, its workdir removed, the new record kept. Deleting a sandbox's
// record is always revision-checked, so a node never deletes a record
// another node wrote in its place. The files of a taken-over sandbox are
// lost with it: they were on the gone node.
//
// Sandboxes outlive a restart of the worker: Close ends running execs
// (they answer unavailable) but keeps records, workdirs and cgroups (and
// the last heartbeat), and Start adopts this node's records again.
// Adopting a workdir also removes the temporary files of fs::write and
// fs::edit (fstool.IsTempFile) older than a minute: a kill -9 between
// their creation and their rename leaves them, and they count toward
// disk_mb. It costs nothing extra as root (adopting walks the workdir to
// fix file owners anyway) and one walk otherwise: an lstat per entry, as
// the disk_mb check after every exec. The reaper runs at Start and
// every reap_interval (default 1m): it destroys this node's sandboxes
// idle (no exec) longer than idle_ttl (default 30m) or older than
// max_age (default 24h, even while running), sweeps the records as the
// section above says (one scan of the bucket: a watcher that delivers
// every record and heartbeat once), and removes workdirs
// (folders named like sandbox ids) under this node's root whose session
// has no record of them, and cgroups of no live sandbox — a crash's
// leftovers (adopting a record makes its cgroups again). Heartbeats name
// the node's root and host: a reaper on that host removes (os.Remove,
// only when empty) the per-home root under [SystemRoot] of a node silent
// for orphan_after, unless a live node's heartbeat names it or it was
// touched within orphan_after (a node starting now). A workdir whose
// record cannot be read is kept: its files are the session's work, and
// the session's next call adopts it.
//
// A session record that does not decode (or names another session)
// wraps [ErrBadRecord]: nothing can reach the sandbox it named. exec,
// shell::exec and [Worker.Workdir] answer not_found wrapping
// [ErrNoSandbox] and [ErrBadRecord] ("…; sandbox::create replaces it,
// sandbox::destroy deletes it"); create deletes it (logged,
// revision-checked) and makes a new sandbox; destroy deletes it and
// answers destroyed; list skips it (logged). The reaper keeps it, and
// the workdir it may name, until it was written max_age plus orphan_after
// ago (it may be a live sandbox's, written by a version this node cannot
// read), then deletes it (bad_records); the workdir goes at the next run. A record of this node whose workdir
// is gone (a crash between the record and the folder) is deleted when
// Start or the session's next call finds it. Other folders in the root
// are left alone.
//
// # Lifecycle
//
//  1. New: the registry builds a [Worker]; embedders use [NewWorker].
//  2. Provision: read the settings (root, node, allow_unsandboxed, bwrap,
//     cgroup_root, uid, gid, host_uid, host_gid, max_output_bytes,
//     kill_grace, idle_ttl, max_age, reap_interval, orphan_after,
//     default_<limit>, max_<limit>); any other, or a malformed value, is
//     an error.
//  3. Start: create the root, find the cgroups, probe bubblewrap (as the
//     host user, else as root), write the heartbeat, adopt this node's
//     records, reap, start the reaper and the heartbeat, register the
//     five functions (each with its skill document) on the engine worker
//     "sandbox".
//  4. Close: end running execs, stop the endpoints, the reaper and the
//     heartbeat; remove the root when it holds no workdir.
//
// # Example
//
//	w := sandbox.NewWorker(sandbox.WithRoot("/var/lib/iii/sandboxes"))
//	if err := w.Start(ctx, e); err != nil { ... }
//	defer w.Close(ctx)
//	sb, err := engine.Call[sandbox.Sandbox](ctx, e, sandbox.CreateFunction,
//		sandbox.CreateRequest{SessionID: sid, Limits: sandbox.Limits{MemoryMB: 512}})
//	res, err := engine.Call[sandbox.Result](engine.WithSession(ctx, sid, mid), e,
//		sandbox.ShellExecFunction, sandbox.Command{Command: "go test ./..."})
//
// From a shell:
//
//	nats req iii.fn.sandbox.create '{"session_id":"s1"}'
//	nats req iii.fn.sandbox.exec '{"sandbox_id":"s1_k3j9x2qa7b","command":"ls -la"}'
package sandbox
